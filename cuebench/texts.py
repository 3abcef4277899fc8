"""The study's texts (consent, instructions, debrief, completion page): Markdown files the researcher owns.

They live in ``EXPDIR/texts/NAME.md`` (DESIGN.md, "Experiment directory"), so an ethics
board reviews, and the researcher edits, exactly what participants read, with no change to
the installed package. The build writes defaults that describe *this* experiment (its task,
practice and its feedback, breaks, the image and answer times, "not clear", the trial count and
an estimated duration from its timing). A rebuild rewrites the defaults the researcher never
edited; an edited file is never overwritten, and while it contradicts the experiment (trial
count, practice, time limit, breaks, duration) ``serve`` and ``lab run`` refuse, naming the lines. The web task and the lab runner
render the files with HTML escaped: Markdown formatting only, no script a copied folder could
smuggle in.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path

from .counterbalance import participant_sequence
from .errors import CuebenchError
from .expdir import ExperimentDir, atomic_write
from .trial_types import card, seconds
from .trials import Experiment, Timing

TEXTS_DIR = "texts"
NAMES = ("consent", "instructions", "debrief", "completion", "closed", "time_up", "ended_early")
"""The texts a participant may read: the last three are the pages of a study that ends a session early or takes
nobody more (``cuebench serve --target-n``, ``--time-limit``, ``--end-on-failed-attention``)."""
RESPONSE_ALLOWANCE_MS = 1500
"""Time assumed for an answer without a response window, for the duration estimate."""
SETUP_MINUTES = 3
"""Reading the instructions, the browser check and going fullscreen."""
BREAK_MINUTES = 0.5
DEFAULTS_RECORD = ".defaults.json"
"""``texts/.defaults.json``: name -> SHA-256 of the default last written or checked, so a rebuild
whose defaults differ can tell an unedited kept file (rewritten) from an edited one (kept, checked)."""


def text_path(expdir: ExperimentDir, name: str) -> Path:
    return expdir.root / TEXTS_DIR / f"{name}.md"


def trial_ms(timing) -> int:
    """A trial's expected length: fixation, image, mask, the answer (its window, else
    :data:`RESPONSE_ALLOWANCE_MS`; a window counted from onset overlaps the image) and the ITI."""
    shown = timing.stimulus + (timing.mask or 0)
    answer = timing.response_window or RESPONSE_ALLOWANCE_MS
    return (timing.fixation or 0) + (max(shown, answer) if timing.response_from_onset else shown + answer) + timing.iti


def typical_timing(timings: list) -> Timing | None:
    """The timing most of a kind's test trials have (the texts describe the usual trial)."""
    return Counter(timings).most_common(1)[0][0] if timings else None


def study_facts(experiment: Experiment) -> dict:
    """What the default texts say about this experiment: task and its timing per trial type,
    practice (with feedback), breaks, attention checks, "not clear", trials, minutes."""
    if experiment.assignment is None:  # no groups: every participant sees every trial
        trials, breaks = list(experiment.trials), 0
    else:
        sequence = participant_sequence(experiment, 0, "texts")
        trials = [experiment.trial(s.trial_id) for s in sequence]
        breaks = sum(s.break_before for s in sequence)
    tests = [t for t in trials if t.role == "test"] or trials
    adaptive = adaptive_stand_ins(experiment)
    total_ms = sum(trial_ms(t.timing) for t in trials + adaptive)
    return {"types": trial_type_timings(tests),
            "windows": {t.timing.response_window for t in tests + adaptive},
            "not_clear": experiment.label_set.not_clear,
            "practice": sum(t.role == "practice" for t in trials), "breaks": breaks,
            "attention": any(t.role == "attention" for t in trials), "trials": len(trials) + len(adaptive),
            "adaptive": len(adaptive), "may_stop_early": any(p.stop_ci_width for p in experiment.adaptive),
            "minutes": math.ceil(total_ms / 60000 + SETUP_MINUTES + breaks * BREAK_MINUTES)}


def trial_type_timings(trials: list) -> dict[str, Timing]:
    """Each trial type among ``trials`` -> the timing most of its trials have, types in name order (what the
    texts describe per type)."""
    kinds = sorted({t.trial_type for t in trials})
    return {kind: typical_timing([t.timing for t in trials if t.trial_type == kind]) for kind in kinds}


def adaptive_stand_ins(experiment: Experiment) -> list:
    """A stand-in trial for each answer the QUEST+ blocks may ask for (their maximum, ``plan.trials``), with
    the timing of the block's condition: they come after the fixed sequence and count in every total."""
    out = []
    for plan in experiment.adaptive:
        shown = [tid for ids in experiment.adaptive_trials(plan.condition).values() for tid in ids]
        out += [experiment.trial(shown[0])] * plan.trials if shown else []
    return out


def task_sentences(facts: dict) -> list[str]:
    """What a participant does in one trial, per trial type (its card's sentence, from its timing)."""
    out = [card(kind).task_sentence(timing, facts) for kind, timing in facts["types"].items()]
    if not out:
        out.append("an image appears; then you give your answer")
    if len(out) > 1:
        return [f"In some trials, {out[0]}", *(f"In other trials, {sentence}" for sentence in out[1:])]
    return [out[0][0].upper() + out[0][1:]]


SUPPRESSED = {
    "grayscale": "colour was taken away", "channel_shuffle": "the colours were swapped",
    "bilateral": "fine texture was smoothed away", "gaussian_blur": "the image was blurred",
    "box_blur": "the image was blurred", "median_blur": "fine texture was smoothed away",
    "nonlocal_means": "fine texture was smoothed away",
    "patch_shuffle": "the image was cut into tiles that were shuffled, which breaks up the object's shape",
    "patch_rotation": "the image was cut into tiles that were turned, which breaks up the object's shape",
    "grid_overlay": "a grid of lines was drawn over the image",
}
"""Suppression conditions as the debrief names them: what each took away (Burgert et al. 2025)."""

ODDITY_DEBRIEF = ("In the trials with three images, two were versions of the same photograph that kept its "
                  "textures and colours but scrambled how its parts are arranged; the odd one out was the "
                  "photograph itself. Finding it needs the global structure of the image.")
"""DiST (Wen et al. 2024): what the oddity trials tested, said only after the last trial."""

DESIGN_DEBRIEFS = {
    "cue-conflict-import": "Most images combined the shape of one object with the texture of another (for example "
                           "the outline of a cat filled with elephant skin). Which of the two you named tells "
                           "whether you went by shape or by texture.",
    "cue-conflict-eed": "Most images combined the outline of one object with the surface texture of another. "
                        "Which of the two you named tells whether you went by shape or by texture.",
    "cue-decomposition": "Some images kept only an object's outlines and others only its surface texture, so each "
                         "answer tells which of the two was enough to recognise it.",
    "dist": ODDITY_DEBRIEF,
    "dist-import": ODDITY_DEBRIEF,
    "corruptions": "The photographs were degraded, by noise, blur or other distortions of increasing strength, "
                   "to measure how well recognition holds up as they get stronger.",
    "diagvib": "The images varied in shape, texture, colour, brightness, position and size, to find out which of "
               "these you use to tell them apart.",
}
"""What each design changed, in words a participant follows (the papers in DESIGN.md)."""


def debrief_sentence(experiment: Experiment) -> str:
    """What this study's images had changed: the design's own sentence, or, for feature suppression and
    mixed studies, one clause per suppression condition its test trials use and the oddity sentence."""
    if experiment.design in DESIGN_DEBRIEFS:
        return DESIGN_DEBRIEFS[experiment.design]
    tests = [t for t in experiment.trials if t.role == "test"]
    changes = list(dict.fromkeys(SUPPRESSED[t.condition] for t in tests if t.condition in SUPPRESSED))
    parts = [f"Some photographs were shown unchanged; in others {'; in others '.join(changes)}."] if changes else []
    if any(t.trial_type == "oddity" for t in tests):
        parts.append(ODDITY_DEBRIEF)
    return " ".join(parts) or "Some of the images were changed so that part of their visual information was taken away."


def default_texts(experiment: Experiment) -> dict[str, str]:
    """Per-design default Markdown for each of :data:`NAMES`, every sentence from :func:`study_facts`."""
    f = study_facts(experiment)
    what = " ".join(sentence if sentence.endswith(".") else sentence + "." for sentence in task_sentences(f))
    counted = " (practice included)" if f["practice"] else ""
    up_to = "up to " if f["may_stop_early"] else ""
    structure = [f"There are {up_to}**{f['trials']} trials**{counted} and the study takes about **{f['minutes']} "
                 "minutes**."]
    structure.append((f"The first {f['practice']} trials are practice." if f["practice"] > 1 else
                      "The first trial is practice.") if f["practice"] else "There is no practice part.")
    structure.append(f"You can rest during {f['breaks']} short break{'s' if f['breaks'] != 1 else ''}."
                     if f["breaks"] else "There are no breaks; the study is short.")
    if f["attention"]:
        structure.append("Some trials tell you which answer to give: please follow them.")
    feedback = ("The practice trials tell you whether your answer was right; the other trials give no feedback."
                if f["practice"] else "There is no feedback.")
    return {
        "consent": f"# Welcome\n\nIn this study you look at images on the screen. {what} "
                   f"It takes about {f['minutes']} minutes and needs a computer with a keyboard, a mouse and a "
                   "browser that can go fullscreen.\n\n## Consent\n\n"
                   "- Taking part is voluntary; you can stop at any time by closing the window.\n"
                   "- We store your answers, response times, the timing your browser achieved, your screen size "
                   "and browser name, and the ID or entry code you came with. We store no name or e-mail "
                   "address, and not your internet (IP) address: to stop repeated starts, the server keeps only a "
                   "coded form of it that cannot be turned back into the address.\n"
                   "- You can withdraw later: send the researchers the ID or entry code you came with, and "
                   "everything stored about you is deleted.\n"
                   "- The data are used for research on visual perception and may be published without anything "
                   "that identifies you.\n",
        "instructions": f"# Instructions\n\nEach trial starts with a small cross in the middle of the screen: look "
                        f"at it. {what}\n\n" + " ".join(structure) + "\n\nAnswer as quickly and accurately as "
                        f"you can. {feedback}\n",
        "debrief": f"# About this study\n\n{debrief_sentence(experiment)} Comparing your answers with those of "
                   "computer vision models shows which visual information people and models rely on.\n",
        "completion": "# Thank you!\n\nYou have completed the study.\n",
        "closed": "# The study is full\n\nThank you for your interest. This study has all the participants it "
                  "needs, so it takes nobody more. Nothing about you has been stored.\n\nIf you came from "
                  "Prolific, please return the study there (do not submit it).\n",
        "time_up": "# Time is up\n\nThe time allowed for this study has passed, so your session has ended. The "
                   "answers you gave are kept.\n",
        "ended_early": "# The study has ended\n\nOne of the trials told you which answer to give, and the answer "
                       "given was a different one, so the study ends here. Thank you for your time.\n",
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _record_path(expdir: ExperimentDir) -> Path:
    return expdir.root / TEXTS_DIR / DEFAULTS_RECORD


def _read_record(expdir: ExperimentDir) -> dict[str, str]:
    try:
        record = json.loads(_record_path(expdir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(expdir: ExperimentDir, record: dict[str, str]) -> None:
    atomic_write(_record_path(expdir), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def refresh_texts(expdir: str | Path | ExperimentDir, experiment: Experiment | None = None) -> dict[str, str]:
    """Bring the texts up to this build: write each missing file from the defaults (``written``), rewrite a
    kept default the researcher never edited when this experiment's default differs (``rewritten``: a
    rebuild with a new timing or trial count must not leave "There is no time limit" behind), and keep an
    edited one (``edited``: :func:`contradictions` then checks its numbers). Returns name -> what happened,
    for the files that changed or went stale; the record (:data:`DEFAULTS_RECORD`) then holds this build's
    defaults, so each change is reported once."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    record = _read_record(expdir)
    defaults = default_texts(experiment or expdir.load())
    done = {}
    for name in NAMES:
        path, digest = text_path(expdir, name), _digest(defaults[name])
        if not path.exists():
            done[name] = "written"
        elif record.get(name) not in (None, digest):
            done[name] = "rewritten" if _digest(path.read_text(encoding="utf-8")) == record[name] else "edited"
        else:
            continue
        if done[name] != "edited":
            atomic_write(path, defaults[name].encode("utf-8"))
        record[name] = digest
    if done:
        _write_record(expdir, record)
    return done


def write_default_texts(expdir: str | Path | ExperimentDir, experiment: Experiment | None = None) -> list[Path]:
    """The files :func:`refresh_texts` wrote (missing ones, and unedited defaults of an earlier build)."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    return [text_path(expdir, name) for name, done in refresh_texts(expdir, experiment).items() if done != "edited"]


def stale_warning(expdir: ExperimentDir, done: dict[str, str]) -> str | None:
    """One line telling the researcher which kept texts this build rewrote or left stale, and what to do;
    None when there are none."""
    rewritten = [f"{n}.md" for n, what in done.items() if what == "rewritten"]
    edited = [f"{n}.md" for n, what in done.items() if what == "edited"]
    if not rewritten and not edited:
        return None
    todo = ([f"rewrote {', '.join(rewritten)} (unedited defaults) to match"] if rewritten else []) \
        + ([f"check the numbers in your edited {', '.join(edited)}: `cuebench serve` and `cuebench lab run` refuse "
            "while a text contradicts the study"] if edited else [])
    return (f"note: {expdir.root.name}/{TEXTS_DIR}/ held texts written for an earlier build, and this build's "
            f"trial count, timing or task differ: {'; '.join(todo)}")


class TextsContradictError(CuebenchError):
    """An edited text says something about the study (trials, practice, time limit, breaks, duration) that the
    experiment no longer does."""


def _claims(line: str, facts: dict) -> list[tuple[str, str]]:
    """(the words, what the experiment has instead) for each claim of a text's line about the study that
    the experiment contradicts."""
    text = line.replace("*", "")
    found = []
    total, practice = facts["trials"], facts["practice"]
    for m in re.finditer(r"\b(?:(first|every|each|last)\s+)?(\d+)\s+trials\b(\s+are\s+practice)?", text, re.I):
        before, n = (m.group(1) or "").lower(), int(m.group(2))
        if (before == "first" or m.group(3)) and n != practice:
            found.append((m.group(0), f"the experiment has {practice} practice trials"))
        elif not before and not m.group(3) and n not in (total, total - practice):
            adaptive = f" ({facts['adaptive']} of them adaptive, QUEST+, at most)" if facts["adaptive"] else ""
            found.append((m.group(0), f"a participant answers {total}{adaptive}"))
    for pattern, wrong in ((r"\bfirst trial is practice\b", practice != 1), (r"\bno practice\b", practice != 0)):
        m = re.search(pattern, text, re.I)
        if m and wrong:
            found.append((m.group(0), f"the experiment has {practice} practice trials"))
    for m in re.finditer(r"\b(\d+|no)\s+(?:short\s+)?breaks?\b", text, re.I):
        if (0 if m.group(1).lower() == "no" else int(m.group(1))) != facts["breaks"]:
            found.append((m.group(0), f"a participant gets {facts['breaks']} breaks"))
    windows = facts["windows"]
    limits = " or ".join(sorted(seconds(w) for w in windows if w is not None)) or "no time limit"
    m = re.search(r"\bno time limit\b", text, re.I)
    if m and None not in windows:
        found.append((m.group(0), f"the answer must come within {limits}"))
    for m in re.finditer(r"(\d+(?:\.\d+)?)\s+seconds?\s+to\s+answer", text, re.I):
        if round(float(m.group(1)) * 1000) not in windows:
            found.append((m.group(0), f"the experiment allows {limits}"))
    for m in re.finditer(r"\babout\s+(\d+)\s+minutes\b", text, re.I):
        if abs(int(m.group(1)) - facts["minutes"]) > max(2, facts["minutes"] / 4):
            found.append((m.group(0), f"the trials and breaks take about {facts['minutes']} minutes"))
    return found


def contradictions(expdir: ExperimentDir, experiment: Experiment) -> list[str]:
    """Every claim in the texts about the trial count, practice, time limit, breaks or duration that the
    experiment contradicts, as ``texts/NAME.md:LINE: "WORDS", but FACT``."""
    facts = study_facts(experiment)
    out = []
    for name in NAMES:
        path = text_path(expdir, name)
        if path.exists():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                out += [f'{TEXTS_DIR}/{name}.md:{number}: "{words}", but {fact}'
                        for words, fact in _claims(line, facts)]
    return out


ALLOW_FLAG = "--allow-text-mismatch"


def check_texts(expdir: ExperimentDir, experiment: Experiment) -> None:
    """Bring the texts up to the experiment (``refresh_texts``), then refuse to run a study whose texts
    contradict it (``contradictions``), naming the lines to fix; the runners' :data:`ALLOW_FLAG` skips
    this for a researcher who has checked them."""
    refresh_texts(expdir, experiment)
    problems = contradictions(expdir, experiment)
    if problems:
        raise TextsContradictError(
            f"{expdir.root.name}/{TEXTS_DIR}/ contradicts experiment.json in {len(problems)} place(s); fix these lines "
            f"(or delete an unedited file to get this build's default), or pass {ALLOW_FLAG} to run anyway:\n  "
            + "\n  ".join(problems))


def render(expdir: ExperimentDir, name: str) -> str:
    """The text as HTML (CommonMark; raw HTML in the file is shown escaped, never run)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).render(text_path(expdir, name).read_text(encoding="utf-8"))


def plain(expdir: ExperimentDir, name: str) -> str:
    """The text for a screen that shows plain text (the PsychoPy lab runner): Markdown marks dropped."""
    lines = text_path(expdir, name).read_text(encoding="utf-8").splitlines()
    return "\n".join(line.lstrip("#").strip().replace("**", "") for line in lines).strip()
