/* Frame-counted phases: durations arrive in ms and are shown as whole frames at the refresh rate measured
 * here; every phase's onset and offset (requestAnimationFrame timestamps) and frame count are logged. */
import { DROPPED_FRAME_FACTOR } from "./constants.js";
import { logEvent } from "./events.js";

/* ms -> frames: nearest whole frame (half rounds up), at least 1 frame for a non-zero phase. */
export function msToFrames(ms, hz) {
  if (!ms) return 0;
  return Math.max(1, Math.round((ms * hz) / 1000));
}

export const nextFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));

/* Show each phase from one rAF callback to the callback at which its planned frames
 * have elapsed (switching when at least frames - 0.5 periods have passed, so a late
 * callback ends a phase on the right vsync). Logs onset/offset, duration and frames. */
export async function runPhases(phases, hz, log) {
  const period = 1000 / hz;
  let t = await nextFrame();
  for (const phase of phases) {
    phase.draw();
    if (phase.onOnset) phase.onOnset(t);
    const onset = t;
    let last = t;
    let callbacks = 1;
    for (;;) {
      t = await nextFrame();
      if (t - last > DROPPED_FRAME_FACTOR * period) log.dropped += 1;
      last = t;
      if (t - onset >= (phase.frames - 0.5) * period) break;
      callbacks += 1;
    }
    log.measured[phase.name] = t - onset;
    log.frames[phase.name] = Math.round((t - onset) / period);
    log.phases.push({ type: "phase", phase: phase.name, onset, offset: t, frames_planned: phase.frames,
                      frames: log.frames[phase.name], callbacks });
  }
  return t;
}

/* Resolves with {response, t} or null on timeout; answers arriving after the window are logged as late. */
export function answerWindow() {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  const win = { open: true, start: null, ms: null, promise };
  win.answer = (response, t) => {
    if (!win.open) { logEvent("late_answer", { response }); return; }
    if (win.ms !== null && win.start !== null && t - win.start > win.ms) { logEvent("late_answer", { response }); return; }
    win.open = false;
    resolve({ response, t });
  };
  win.startClock = (start, ms) => {
    win.start = start;
    win.ms = ms;
    if (ms === null) return;
    (async () => {
      while (win.open) {
        const t = await nextFrame();
        if (win.open && t - start >= ms) { win.open = false; resolve(null); }
      }
    })();
  };
  return win;
}
