/* The web task: browser check, instructions, calibration, fullscreen, practice, blocks and breaks,
 * the adaptive blocks, the questionnaire and the completion code. Each concern is a module beside
 * this one (timing, display, responses, images, server, check, calibration, questionnaire, progress);
 * the words come from the plan (the catalogue, the researcher's texts and each trial's card). See docs/web.md. */
import { escapeHtml, screenEl, showScreen, sleep, state } from "./dom.js";
import { image } from "./display.js";
import { CHECK, browserCheck, judgeCheck, screenFix } from "./check.js";
import { calibrate, stimulusSize } from "./calibration.js";
import { preloadBlock } from "./images.js";
import { adaptiveTotal, progressText, showProgress } from "./progress.js";
import { askQuestionnaire } from "./questionnaire.js";
import { BACKOFF_MS, api, ended, flush, postJSON, queue, refused, requestJSON, withRetry } from "./server.js";
import { msToFrames } from "./timing.js";
import { runTrial } from "./trial.js";
import { say, setWords } from "./words.js";

/* The researcher's texts (EXPDIR/texts/*.md), rendered by the server with HTML escaped. */
let texts = {};

function showOutcome(outcome) {
  showProgress("", 0);
  const text = outcome.message ? `<div id="ended-text">${outcome.message}</div>` // the server ended it early
    : outcome.status === "screened_out"
    ? `<h1>${say("screened_out_title")}</h1><p>${say("screened_out")}</p>` +
      `<p id="screen-fix">${escapeHtml(screenFix(outcome.reason))}</p>`
    : `<div id="completion-text">${texts.completion || ""}</div><div id="debrief-text">${texts.debrief || ""}</div>`;
  const link = outcome.redirect
    ? `<p><a id="redirect" href="${escapeHtml(outcome.redirect)}">${say("return_to_prolific")}</a></p>` : "";
  const code = outcome.code // none for a session past the time limit
    ? `<p>${say("completion_code")}</p><p class="code" id="code" data-status="${outcome.status}">` +
      `${escapeHtml(outcome.code)}</p>`
    : `<p id="code" data-status="${outcome.status}" hidden></p>`;
  showScreen(`${text}${code}${link}`, null, "done");
  if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
  if (outcome.redirect) setTimeout(() => { window.location.href = outcome.redirect; }, 5000);
}

async function finish() {
  state("saving");
  screenEl.innerHTML = `<p>${say("saving")}</p>`;
  screenEl.hidden = false;
  for (;;) {
    await flush();
    const result = await postJSON(`${api}/complete`, {});
    if (result.ok) return showOutcome(result.body);
    if (result.body.outcome) return showOutcome(result.body.outcome); // no code: the server says why
    if (!Object.keys(queue).length && refused.length) {
      return showScreen(`<h1>${say("not_saved_title")}</h1><p>` +
                        `${say("not_saved", { refused: escapeHtml(JSON.stringify(refused.slice(0, 3))) })}</p>`,
                        null, "error");
    }
    await sleep(BACKOFF_MS.first);
  }
}

/* Adaptive (QUEST+) trials: the server chooses each next level from the answers stored so far,
 * so an answer is posted (and retried) before the next trial is asked for. */
async function runAdaptive(plan, hz, device) {
  const fixed = plan.trials.filter((t) => !t.practice).length;
  for (let first = true; !refused.length && !ended.outcome; first = false) {
    const next = await withRetry(() => requestJSON(`${api}/adaptive`));
    if (!next.ok || next.body.done) return;
    if (first) await showScreen(`<h1>${say("adaptive_title")}</h1><p>${say("adaptive")}</p>`, say("continue"), "adaptive");
    await preloadBlock([next.body.trial]);
    const before = plan.adaptive_trials.slice(0, next.body.block).reduce((a, b) => a + b, 0);
    const k = fixed + before + next.body.trial.index + 1, total = fixed + adaptiveTotal(plan);
    showProgress(say("progress_trial", { k, n: total }), k / total);
    await runTrial(next.body.trial, hz, device);
  }
}

/* Where the experiment sets the image size in degrees: the calibration stored once (a reload keeps it),
 * and the image size it gives, recorded with every answer. */
async function sizeImages(plan, device) {
  let calibration = plan.calibration;
  if (!calibration) {
    calibration = await calibrate(plan.display, Math.max(1, ...plan.trials.map((t) => t.images.length)));
    const posted = await postJSON(`${api}/calibration`, calibration);
    if (posted.ok) calibration = posted.body.calibration; // a reload keeps the first calibration
  }
  image.cssPx = calibration.stimulus_css_px;
  Object.assign(device, { stimulus_degrees: plan.display.stimulus_degrees, stimulus_css_px: image.cssPx,
                          px_per_mm: calibration.px_per_mm, viewing_distance_cm: calibration.viewing_distance_cm,
                          distance_method: calibration.method === "card+blind-spot" ? "blind-spot" : "entered" });
}

async function main() {
  const planResult = await withRetry(() => requestJSON(api));
  if (!planResult.ok) return showScreen(`<h1>${say("link_broken")}</h1><p>${escapeHtml(planResult.body.error || "")}</p>`, null, "error");
  const plan = planResult.body;
  texts = plan.texts || {};
  setWords(plan.words);
  if (plan.status !== "in_progress") return showOutcome(plan.outcome);
  flush();
  const done = new Set(plan.answered.concat(Object.keys(queue).map(Number)));
  const found = plan.trials.findIndex((t) => !done.has(t.index));
  const adaptiveLeft = !(await withRetry(() => requestJSON(`${api}/adaptive`))).body.done;
  if (found < 0 && !adaptiveLeft) { // everything answered before a reload: only the questions and the code are missing
    if (plan.questionnaire) await askQuestionnaire(plan.questionnaire);
    return finish();
  }
  const start = found < 0 ? plan.trials.length : found;
  const resumed = done.size > 0;
  const check = await browserCheck(); // before the instructions: nobody reads them on a device that fails
  const device = { user_agent: navigator.userAgent, platform: navigator.platform, dpr: window.devicePixelRatio,
                   refresh: check.refresh, size: check.size };
  if (!check.ok) {
    const result = await postJSON(`${api}/screen`, { reason: check.reason, refresh: check.refresh, size: check.size,
                                                     pointer: check.pointer }); // the server judges them again
    return showOutcome(result.body);
  }
  await showScreen(resumed ? `<h1>${say("welcome_back_title")}</h1><p>${say("welcome_back")}</p>`
                           : `<div id="instructions-text">${texts.instructions}</div>`, say("continue"), "instructions");
  const hz = check.refresh.hz;
  if (plan.display) await sizeImages(plan, device);
  await showScreen(`<p>${say("fullscreen")}</p>`, say("fullscreen_button"), "fullscreen");
  for (let i = start; i < plan.trials.length; i++) {
    const trial = plan.trials[i];
    if (done.has(trial.index)) continue;
    const previous = plan.trials[i - 1];
    const newBlock = i === start || trial.block !== previous.block;
    if (i !== start && previous.practice && !trial.practice) {
      await showScreen(`<h1>${say("practice_over_title")}</h1><p>${say("practice_over")}</p>`, say("continue"), "break");
    } else if (i !== start && trial.break_before) {
      await showScreen(`<h1>${say("break_title")}</h1><p>${say("break")}</p>`, say("continue"), "break");
    }
    if (newBlock) await preloadBlock(plan.trials.filter((t) => t.index >= i && t.block === trial.block));
    showProgress(...progressText(plan, i));
    await runTrial(trial, hz, device);
    // an attention trial's answer may end the session (serve --end-on-failed-attention): wait for the server's
    // verdict then; otherwise answers flow through the queue and an outage does not hold the participant up
    if (trial.instruction && plan.ends_on_failed_attention) await flush();
    if (ended.outcome) return showOutcome(ended.outcome); // the server ended the session early
  }
  await runAdaptive(plan, hz, device);
  if (ended.outcome) return showOutcome(ended.outcome);
  if (plan.questionnaire) await askQuestionnaire(plan.questionnaire);
  await finish();
}

window.cuebenchTask = { msToFrames, judgeCheck, CHECK, stimulusSize, imageSize: () => image.cssPx };
main();
