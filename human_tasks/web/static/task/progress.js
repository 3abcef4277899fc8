/* The counter and, beside it, a bar filled to the share of trials done. */
import { $ } from "./dom.js";
import { say } from "./words.js";

const progressEl = $("progress");
const progressBar = $("progress-bar");

/* Show ``text`` and fill the bar to ``fraction`` (0..1); no text hides the bar. */
export function showProgress(text, fraction) {
  progressEl.textContent = text;
  progressBar.hidden = !text;
  progressBar.firstElementChild.style.width = `${Math.round(100 * Math.min(1, Math.max(0, fraction || 0)))}%`;
}

/* The most answers the adaptive (QUEST+) blocks after the fixed trials may ask for. */
export function adaptiveTotal(plan) {
  return (plan.adaptive_trials || []).reduce((a, b) => a + b, 0);
}

/* ["trial k of n · block b of B", k / n] (practice counted apart; n includes the adaptive trials that
 * follow), so people know how far they are. */
export function progressText(plan, i) {
  const trials = plan.trials, trial = trials[i];
  const same = trials.filter((t) => t.practice === trial.practice);
  const k = same.indexOf(trial) + 1;
  if (trial.practice) return [say("progress_practice", { k, n: same.length }), k / same.length];
  const blocks = [...new Set(same.map((t) => t.block))];
  const block = blocks.length > 1 ? say("progress_block", { b: blocks.indexOf(trial.block) + 1, blocks: blocks.length }) : "";
  const total = same.length + adaptiveTotal(plan);
  return [say("progress_trial", { k, n: total }) + block, k / total];
}
