/* One timed trial: instruction, fixation, the images, the mask, the response (as the trial's card
 * says), the ITI; the answer goes to the local queue with every phase's measured timing. */
import { FEEDBACK_MS } from "./constants.js";
import { escapeHtml, screenEl, showScreen, state } from "./dom.js";
import { clear, drawFixation, drawImages } from "./display.js";
import { takeEvents } from "./events.js";
import { bitmaps } from "./images.js";
import { RESPONSES, closeResponse } from "./responses.js";
import { enqueue, postNow } from "./server.js";
import { answerWindow, msToFrames, runPhases } from "./timing.js";
import { say } from "./words.js";

/* `trial` is the runners' TrialPlan (docs/schemas/trial-plan.schema.json), as the server sent it. */
export async function runTrial(trial, hz, device) {
  const mode = RESPONSES[trial.response];
  if (!mode) throw new Error(`trial ${trial.index + 1} is answered by "${trial.response}", which this task cannot show`);
  takeEvents();
  const log = { measured: {}, frames: {}, phases: [], dropped: 0 };
  const timing = trial.timing;
  if (trial.instruction) {
    const shown = performance.now();
    await showScreen(`<p id="instruction">${escapeHtml(trial.instruction)}</p>`, say("continue"), "instruction");
    log.measured.instruction = performance.now() - shown;
  }
  const win = answerWindow();
  const images = trial.images.map((u) => bitmaps.get(u));
  const phases = [];
  if (timing.fixation) phases.push({ name: "fixation", frames: msToFrames(timing.fixation, hz), draw: drawFixation });
  let stimulusOnset = null;
  const onStimulus = (t) => {
    stimulusOnset = t;
    mode.onStimulus(trial, win);
    if (timing.response_from_onset) win.startClock(t, timing.response_window);
  };
  phases.push({ name: "stimulus", frames: msToFrames(timing.stimulus, hz),
                draw: () => drawImages(images, trial.numbered), onOnset: onStimulus });
  if (trial.mask) phases.push({ name: "mask", frames: msToFrames(timing.mask, hz), draw: () => drawImages([bitmaps.get(trial.mask)], false) });
  const t = await runPhases(phases, hz, log);
  const responseOnset = mode.respond(trial, win, t, stimulusOnset);
  const answer = await win.promise;
  closeResponse();
  const end = answer ? answer.t : performance.now();
  log.measured.response = end - responseOnset;
  // the runners' TrialAnswer (docs/schemas/trial-answer.schema.json; a browser test validates what is posted)
  const payload = {
    trial_key: trial.trial_key,
    response: answer ? answer.response : "",
    timed_out: !answer,
    rt_ms: answer ? Math.max(0, answer.t - responseOnset) : null,
    timing_measured: log.measured,
    frames: log.frames,
    dropped_frames: log.dropped,
    refresh_hz: hz,
    device,
    events: log.phases.concat(takeEvents()),
  };
  const posted = trial.post ? postNow(trial, payload) : enqueue(trial.index, payload);
  if (trial.feedback != null) await showFeedback(trial, answer);
  state("iti", trial.index);
  if (timing.iti) await runPhases([{ name: "iti", frames: msToFrames(timing.iti, hz), draw: clear }], hz,
                                  { measured: {}, frames: {}, phases: [], dropped: 0 });
  await posted;
}

/* Practice trials say whether the answer was right (the same words as the lab runner's), naming the right
 * answer as its button does. */
async function showFeedback(trial, answer) {
  const cell = (trial.grid || []).find((c) => c.label === trial.feedback);
  const text = answer && answer.response === trial.feedback ? say("feedback_correct")
    : say("feedback_wrong", { answer: cell ? cell.name : trial.feedback });
  await showScreen(`<p id="feedback">${escapeHtml(text)}</p>`, null, "feedback");
  await new Promise((resolve) => setTimeout(resolve, FEEDBACK_MS));
  screenEl.hidden = true;
}
