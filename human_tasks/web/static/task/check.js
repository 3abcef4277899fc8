/* The browser check before the instructions: a steady refresh rate and the device rules of the consent
 * page (device.js). */
import { MAX_OUTLIER_SHARE } from "./constants.js";
import { screenEl, sleep, state } from "./dom.js";
import { nextFrame } from "./timing.js";
import { say } from "./words.js";

/* Median of CHECK.intervals rAF intervals after a warm-up; unstable when more than maxOutlierShare of
 * the intervals are off the median by more than a factor `outlier` (a dropped frame doubles an
 * interval; the share is Python's, human_tasks/web/constants.py, by which the server judges it again). */
export const CHECK = { intervals: 150, warmup: 10, minHz: 48, maxHz: 500, outlier: 1.5,
                       maxOutlierShare: MAX_OUTLIER_SHARE, timeoutMs: 15000 };
// serve --refresh-hz
Object.assign(CHECK, { minHz: window.cuebenchDevice.RULES.minHz, maxHz: window.cuebenchDevice.RULES.maxHz });

async function measureRefresh() {
  const intervals = [];
  let last = await nextFrame();
  for (let i = 0; i < CHECK.warmup + CHECK.intervals; i++) {
    const t = await nextFrame();
    if (i >= CHECK.warmup) intervals.push(t - last);
    last = t;
  }
  const sorted = intervals.slice().sort((a, b) => a - b);
  const mid = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(mid)] : (sorted[mid - 1] + sorted[mid]) / 2;
  const outliers = intervals.filter((x) => x > CHECK.outlier * median || x < median / CHECK.outlier).length;
  return { hz: 1000 / median, median_ms: median, outlier_share: outliers / intervals.length, n: intervals.length };
}
export async function browserCheck() {
  state("check");
  screenEl.innerHTML = `<p>${say("checking_display")}</p>`;
  screenEl.hidden = false;
  const refresh = await Promise.race([measureRefresh(), sleep(CHECK.timeoutMs).then(() => null)]);
  screenEl.hidden = true;
  const { size, pointer } = window.cuebenchDevice.measure();
  const reason = judgeCheck(refresh, size, pointer);
  return { ok: reason === null, reason, refresh, size, pointer };
}
/* Why a measured display fails the check, or null when it passes: the device rules of the consent
 * page (device.js) and a steady refresh rate. */
export function judgeCheck(refresh, size, pointer) {
  if (!refresh) return "the browser drew no animation frames (hidden window?)";
  if (refresh.hz < CHECK.minHz || refresh.hz > CHECK.maxHz) return `refresh rate ${refresh.hz.toFixed(1)} Hz`;
  if (refresh.outlier_share > CHECK.maxOutlierShare)
    return `unstable frame timing (${(100 * refresh.outlier_share).toFixed(0)}% irregular frames)`;
  const problem = window.cuebenchDevice.deviceProblem(size, pointer);
  return problem ? problem.reason : null;
}
/* What a screened-out participant can change, in the study's language, from the reason the check gave
 * (judgeCheck's words, which are stored for the researcher in English). */
export function screenFix(reason) {
  const text = reason || "";
  const range = { min: CHECK.minHz, max: CHECK.maxHz };
  const hz = /^refresh rate ([\d.]+) Hz/.exec(text);
  if (hz) return say("device_refresh", { hz: Number(hz[1]).toFixed(0), ...range });
  const unsteady = /^unstable frame timing \((\d+)%/.exec(text);
  if (unsteady) return say("display_fix", { problem: say("display_unsteady", { share: unsteady[1] }), ...range });
  if (/animation frames/.test(text)) return say("display_fix", { problem: say("display_no_frames"), ...range });
  const { size, pointer } = window.cuebenchDevice.measure();
  const problem = window.cuebenchDevice.deviceProblem(size, pointer);
  return problem ? problem.fix : "";
}
