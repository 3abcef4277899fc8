"""The study's texts (consent, instructions, debrief, completion page): Markdown files the researcher owns.

They live in ``EXPDIR/texts/NAME.md`` (DESIGN.md, "Experiment directory"), so an ethics
board reviews, and the researcher edits, exactly what participants read, with no change to
the installed package. The build writes defaults that describe *this* experiment (its task,
practice, breaks, trial count and an estimated duration from its timing); an existing file
is never overwritten. The web task and the lab runner render the files with HTML escaped:
Markdown formatting only, no script a copied folder could smuggle in.
"""

from __future__ import annotations

import math
from pathlib import Path

from .design import participant_sequence
from .expdir import ExperimentDir, atomic_write
from .trials import Experiment

TEXTS_DIR = "texts"
NAMES = ("consent", "instructions", "debrief", "completion")
RESPONSE_ALLOWANCE_MS = 1500
"""Time assumed for an answer without a response window, for the duration estimate."""
SETUP_MINUTES = 3
"""Reading the instructions, the browser check and going fullscreen."""
BREAK_MINUTES = 0.5


def text_path(expdir: ExperimentDir, name: str) -> Path:
    return expdir.root / TEXTS_DIR / f"{name}.md"


def trial_ms(timing) -> int:
    """A trial's expected length: fixation, image, mask, the answer (its window, else
    :data:`RESPONSE_ALLOWANCE_MS`; a window counted from onset overlaps the image) and the ITI."""
    shown = timing.stimulus + (timing.mask or 0)
    answer = timing.response_window or RESPONSE_ALLOWANCE_MS
    return (timing.fixation or 0) + (max(shown, answer) if timing.response_from_onset else shown + answer) + timing.iti


def study_facts(experiment: Experiment) -> dict:
    """What the default texts say about this experiment: task, practice, breaks, trials, minutes."""
    if experiment.assignment is None:  # no groups: every participant sees every trial
        trials, breaks = list(experiment.trials), 0
    else:
        sequence = participant_sequence(experiment, 0, "texts")
        trials = [experiment.trial(s.trial_id) for s in sequence]
        breaks = sum(s.break_before for s in sequence)
    kinds = {t.trial_type for t in trials if t.role == "test"}
    total_ms = sum(trial_ms(t.timing) for t in trials)
    return {"oddity": "oddity" in kinds, "classify": "classify" in kinds or not kinds,
            "practice": any(t.role == "practice" for t in trials), "breaks": breaks,
            "attention": any(t.role == "attention" for t in trials), "trials": len(trials),
            "minutes": math.ceil(total_ms / 60000 + SETUP_MINUTES + breaks * BREAK_MINUTES)}


def default_texts(experiment: Experiment) -> dict[str, str]:
    """Per-design default Markdown for each of :data:`NAMES`."""
    f = study_facts(experiment)
    task = []
    if f["classify"]:
        task.append("a photograph flashes briefly and is covered by noise; then you click the label of what it "
                    "showed (guess if unsure; choose \"not clear\" only if you saw nothing)")
    if f["oddity"]:
        task.append("three images appear side by side, two share their layout and one does not; press **1**, "
                    "**2** or **3** for the odd one")
    what = f"In some trials, {task[0]}. In other trials, {task[1]}" if len(task) == 2 else \
        task[0][0].upper() + task[0][1:]
    counted = " (practice included)" if f["practice"] else ""
    structure = [f"There are **{f['trials']} trials**{counted} and the study takes about **{f['minutes']} "
                 "minutes**."]
    structure.append("A few practice trials come first." if f["practice"] else "There is no practice part.")
    structure.append(f"You can rest during {f['breaks']} short break{'s' if f['breaks'] != 1 else ''}."
                     if f["breaks"] else "There are no breaks; the study is short.")
    if f["attention"]:
        structure.append("Some trials tell you which answer to give: please follow them.")
    return {
        "consent": f"# Welcome\n\nIn this study you look at images on the screen. {what}. "
                   f"It takes about {f['minutes']} minutes and needs a computer with a keyboard, a mouse and a "
                   "browser that can go fullscreen.\n\n## Consent\n\n"
                   "- Taking part is voluntary; you can stop at any time by closing the window.\n"
                   "- We store your answers, response times, the timing your browser achieved, your screen size "
                   "and browser name, and the ID or entry code you came with. We store no name or e-mail "
                   "address.\n"
                   "- The data are used for research on visual perception and may be published without anything "
                   "that identifies you.\n",
        "instructions": f"# Instructions\n\nEach trial starts with a small cross in the middle of the screen: look "
                        f"at it. {what}.\n\n" + " ".join(structure) + "\n\nAnswer as quickly and accurately as "
                        "you can. There is no feedback.\n",
        "debrief": "# About this study\n\nThe images were changed so that some visual cues (shape, texture, "
                   "colour or global structure) were removed or put in conflict. Comparing your answers with "
                   "those of computer vision models shows which cues people and models rely on.\n",
        "completion": "# Thank you!\n\nYou have completed the study.\n",
    }


def write_default_texts(expdir: str | Path | ExperimentDir, experiment: Experiment | None = None) -> list[Path]:
    """Write each missing text file from the defaults; returns the files written (existing ones are kept)."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    missing = [name for name in NAMES if not text_path(expdir, name).exists()]
    if not missing:
        return []
    defaults = default_texts(experiment or expdir.load())
    for name in missing:
        atomic_write(text_path(expdir, name), defaults[name].encode("utf-8"))
    return [text_path(expdir, name) for name in missing]


def render(expdir: ExperimentDir, name: str) -> str:
    """The text as HTML (CommonMark; raw HTML in the file is shown escaped, never run)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(text_path(expdir, name).read_text(encoding="utf-8"))


def plain(expdir: ExperimentDir, name: str) -> str:
    """The text for a screen that shows plain text (the PsychoPy lab runner): Markdown marks dropped."""
    lines = text_path(expdir, name).read_text(encoding="utf-8").splitlines()
    return "\n".join(line.lstrip("#").strip().replace("**", "") for line in lines).strip()
