/* The two ways of answering a trial's card can name (cuebench.trial_types.RESPONSES; the lab runner has
 * the same two). The card's keys, prompt and numbering come with each trial in the plan. */
import { gridEl, keys, state } from "./dom.js";
import { clear, drawPrompt } from "./display.js";
import { say } from "./words.js";

/* The lab's response screen (human_tasks/layout.py): each label in its cell of the 4-column
 * grid, "not clear" below it across the middle two columns, named in the study's language (the
 * answer stored stays the label). */
function showGrid(grid, win) {
  gridEl.innerHTML = "";
  grid.forEach(({ label, name, row, col }) => {
    const b = document.createElement("button");
    b.textContent = col === null ? say("answer_not_clear") : name;
    b.dataset.label = label;
    b.style.gridRow = String(row + 1);
    b.style.gridColumn = col === null ? "2 / span 2" : String(col + 1);
    if (col === null) b.className = "not-clear";
    b.addEventListener("click", (e) => win.answer(label, e.timeStamp));
    gridEl.appendChild(b);
  });
  gridEl.hidden = false;
}

/* Each key of the card's answer -> key map answers with its answer. */
function listenForKeys(trial, win) {
  state("response-keys", trial.index);
  const answers = new Map(Object.entries(trial.keys).map(([answer, key]) => [key, answer]));
  keys.handler = (e) => { if (answers.has(e.key)) win.answer(answers.get(e.key), e.timeStamp); };
}

/* onStimulus runs at stimulus onset, respond shows the response screen after the mask and returns the
 * time the response period began. */
export const RESPONSES = {
  "label-grid": {
    onStimulus: (trial) => state("stimulus", trial.index),
    respond: (trial, win, t) => {
      clear();
      showGrid(trial.grid, win);
      state("response-grid", trial.index);
      if (!trial.timing.response_from_onset) win.startClock(t, trial.timing.response_window);
      return t;
    },
  },
  keys: { // from stimulus onset where the timing counts the answer from there (DiST), else after the mask
    onStimulus: (trial, win) => {
      if (trial.timing.response_from_onset) listenForKeys(trial, win);
      else state("stimulus", trial.index);
    },
    respond: (trial, win, t, stimulusOnset) => {
      drawPrompt(trial.prompt || "");
      if (trial.timing.response_from_onset) return stimulusOnset;
      listenForKeys(trial, win);
      win.startClock(t, trial.timing.response_window);
      return t;
    },
  },
};

/* The response screen is gone: no key answers, no grid. */
export function closeResponse() {
  keys.handler = null;
  gridEl.hidden = true;
}
