"""The study's texts (consent, instructions, debrief, completion page): Markdown files the researcher owns.

They live in ``EXPDIR/texts/NAME.md`` (DESIGN.md, "Experiment directory"), so an ethics
board reviews, and the researcher edits, exactly what participants read, with no change to
the installed package. A study in another language than English (``Experiment.language``) reads
``EXPDIR/texts/LANG/NAME.md`` (an English one reads ``texts/en/NAME.md`` where it exists), so one
folder holds a set per language. The build writes defaults, in the study's language from its
catalogue (``cuebench.words``), that describe *this* experiment (its task,
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
from functools import lru_cache
from pathlib import Path

from .counterbalance import participant_sequence
from .errors import CuebenchError
from .expdir import ExperimentDir, atomic_write
from .trial_types import card, seconds
from .trials import Experiment, Timing
from .words import LANGUAGE, say, words

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


def texts_dir(expdir: ExperimentDir, language: str = LANGUAGE) -> Path:
    """Where a language's texts are written: ``texts/`` for English (as before languages), ``texts/LANG/``."""
    return expdir.root / TEXTS_DIR / ("" if language == LANGUAGE else language)


def text_path(expdir: ExperimentDir, name: str, language: str = LANGUAGE) -> Path:
    """The file of one text in ``language``: ``texts/LANG/NAME.md``, for English ``texts/NAME.md`` unless
    ``texts/en/NAME.md`` exists."""
    own = expdir.root / TEXTS_DIR / language / f"{name}.md"
    return own if own.exists() else texts_dir(expdir, language) / f"{name}.md"


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
            "trial_seconds": total_ms / 1000, "minutes": expected_minutes(total_ms, breaks)}


def expected_minutes(trials_ms: float, breaks: int) -> int:
    """How long the study takes a participant, in whole minutes: the trials (``trial_ms`` each), the setup
    (:data:`SETUP_MINUTES`) and the breaks (:data:`BREAK_MINUTES` each), rounded up."""
    return math.ceil(trials_ms / 60000 + SETUP_MINUTES + breaks * BREAK_MINUTES)


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


def task_sentences(facts: dict, language: str = LANGUAGE) -> list[str]:
    """What a participant does in one trial, per trial type (its card's sentence, from its timing)."""
    out = [card(kind).task_sentence(timing, facts, language) for kind, timing in facts["types"].items()]
    if not out:
        out.append(say("task_unknown", language))
    if len(out) > 1:
        return [_lead_in("task_some", out[0], language),
                *(_lead_in("task_other", sentence, language) for sentence in out[1:])]
    return [_capitalised(out[0])]


def _capitalised(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def _lead_in(key: str, sentence: str, language: str) -> str:
    """A card's sentence after the catalogue's lead-in ("In some trials, ..."); a lead-in that ends in a colon
    ("In manchen Durchgängen gilt: ...") is followed by a whole sentence, capitalised."""
    lead = words(language)[key]
    return say(key, language, sentence=_capitalised(sentence) if ": {sentence}" in lead else sentence)


DESIGN_DEBRIEF = "debrief_{design}"
"""The catalogue key of a design's own debrief sentence (in the fragment beside the design, ``cuebench.words``): what
the study changed, in words a participant follows (the papers in DESIGN.md)."""
CONDITION_CLAUSE = "suppressed_{condition}"
"""The key of a transform's clause on what it took away (in the fragment beside the transforms)."""
TRIAL_TYPE_DEBRIEF = "debrief_trials_{trial_type}"
"""The key of a trial type's sentence on what its trials tested (in the fragment beside its card)."""


def debrief_sentence(experiment: Experiment) -> str:
    """What this study's images had changed, in the study's language: the design's own sentence
    (:data:`DESIGN_DEBRIEF`), or, for a design without one (feature suppression, mixed studies), one clause per
    condition of its test trials whose transform has one (:data:`CONDITION_CLAUSE`: what it took away, Burgert et
    al. 2025) and the sentence of each trial type of its test trials that has one (:data:`TRIAL_TYPE_DEBRIEF`: the
    DiST oddity's, Wen et al. 2024, what those trials tested, said only after the last trial). Which keys exist is
    read from the English catalogue, so a fragment that lacks a translation fails loudly, naming its file."""
    english, language = words(), experiment.language
    own = DESIGN_DEBRIEF.format(design=experiment.design)
    if own in english:
        return say(own, language)
    tests = [t for t in experiment.trials if t.role == "test"]
    clauses = [CONDITION_CLAUSE.format(condition=c) for c in dict.fromkeys(t.condition for t in tests)]
    changes = list(dict.fromkeys(say(key, language) for key in clauses if key in english))
    parts = [say("debrief_changes", language, changes=say("debrief_and", language).join(changes))] if changes else []
    kinds = [TRIAL_TYPE_DEBRIEF.format(trial_type=k) for k in dict.fromkeys(t.trial_type for t in tests)]
    parts += [say(key, language) for key in kinds if key in english]
    return " ".join(parts) or say("debrief_unknown", language)


def default_texts(experiment: Experiment) -> dict[str, str]:
    """Per-design default Markdown for each of :data:`NAMES` in the study's language, every sentence from
    :func:`study_facts`."""
    f, language = study_facts(experiment), experiment.language

    def phrase(key: str, **values) -> str:
        return say(key, language, **values)

    what = " ".join(sentence if sentence.endswith(".") else sentence + "."
                    for sentence in task_sentences(f, language))
    structure = [phrase("text_trials", up_to=phrase("text_up_to") if f["may_stop_early"] else "", trials=f["trials"],
                        counted=phrase("text_practice_included") if f["practice"] else "", minutes=f["minutes"])]
    structure.append((phrase("text_practice_many", n=f["practice"]) if f["practice"] > 1 else
                      phrase("text_practice_one")) if f["practice"] else phrase("text_no_practice"))
    structure.append(phrase("text_break_one" if f["breaks"] == 1 else "text_breaks_many", n=f["breaks"])
                     if f["breaks"] else phrase("text_no_breaks"))
    if f["attention"]:
        structure.append(phrase("text_attention"))
    feedback = phrase("text_feedback_practice") if f["practice"] else phrase("text_no_feedback")
    return {
        "consent": phrase("text_consent", task=what, minutes=f["minutes"]),
        "instructions": phrase("text_instructions", task=what, structure=" ".join(structure), feedback=feedback),
        "debrief": phrase("text_debrief", changes=debrief_sentence(experiment)),
        **{name: phrase(f"text_{name}") for name in ("completion", "closed", "time_up", "ended_early")},
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _record_path(expdir: ExperimentDir, language: str) -> Path:
    return texts_dir(expdir, language) / DEFAULTS_RECORD


def _read_record(expdir: ExperimentDir, language: str) -> dict[str, str]:
    try:
        record = json.loads(_record_path(expdir, language).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(expdir: ExperimentDir, language: str, record: dict[str, str]) -> None:
    atomic_write(_record_path(expdir, language),
                 (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def refresh_texts(expdir: str | Path | ExperimentDir, experiment: Experiment | None = None) -> dict[str, str]:
    """Bring the texts of the study's language up to this build: write each missing file from the defaults
    (``written``), rewrite a kept default the researcher never edited when this experiment's default differs
    (``rewritten``: a rebuild with a new timing or trial count must not leave "There is no time limit"
    behind), and keep an edited one (``edited``: :func:`contradictions` then checks its numbers). Returns
    name -> what happened, for the files that changed or went stale; the record (:data:`DEFAULTS_RECORD`, one
    per language's folder) then holds this build's defaults, so each change is reported once."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    experiment = experiment or expdir.load()
    language = experiment.language
    record = _read_record(expdir, language)
    defaults = default_texts(experiment)
    done = {}
    for name in NAMES:
        path, digest = text_path(expdir, name, language), _digest(defaults[name])
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
        _write_record(expdir, language, record)
    return done


def write_default_texts(expdir: str | Path | ExperimentDir, experiment: Experiment | None = None) -> list[Path]:
    """The files :func:`refresh_texts` wrote (missing ones, and unedited defaults of an earlier build)."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    experiment = experiment or expdir.load()
    return [text_path(expdir, name, experiment.language)
            for name, done in refresh_texts(expdir, experiment).items() if done != "edited"]


def stale_warning(expdir: ExperimentDir, done: dict[str, str], language: str = LANGUAGE) -> str | None:
    """One line telling the researcher which kept texts this build rewrote or left stale, and what to do;
    None when there are none."""
    rewritten = [f"{n}.md" for n, what in done.items() if what == "rewritten"]
    edited = [f"{n}.md" for n, what in done.items() if what == "edited"]
    if not rewritten and not edited:
        return None
    todo = ([f"rewrote {', '.join(rewritten)} (unedited defaults) to match"] if rewritten else []) \
        + ([f"check the numbers in your edited {', '.join(edited)}: `cuebench serve` and `cuebench lab run` refuse "
            "while a text contradicts the study"] if edited else [])
    folder = texts_dir(expdir, language).relative_to(expdir.root).as_posix()
    return (f"note: {expdir.root.name}/{folder}/ held texts written for an earlier build, and this build's "
            f"trial count, timing or task differ: {'; '.join(todo)}")


class TextsContradictError(CuebenchError):
    """An edited text says something about the study (trials, practice, time limit, breaks, duration) that the
    experiment no longer does."""


def _number(match: re.Match) -> float:
    """The number a claim names (its first group that holds one; a decimal comma read as a point)."""
    return next(float(g.replace(",", ".")) for g in match.groups() if g and g[0].isdigit())


def _claims(line: str, facts: dict, language: str = LANGUAGE) -> list[tuple[str, str]]:
    """(the words, what the experiment has instead) for each claim of a text's line about the study that
    the experiment contradicts; how a language states each fact is its catalogue's ``claim_*`` patterns."""
    text = line.replace("*", "")

    def find(key: str) -> list[re.Match]:
        return list(re.finditer(say(key, language), text, re.I))

    found = []
    total, practice = facts["trials"], facts["practice"]
    qualified = find("claim_practice_trials") + find("claim_some_trials")
    for m in find("claim_practice_trials"):
        if _number(m) != practice:
            found.append((m.group(0), f"the experiment has {practice} practice trials"))
    for m in find("claim_trials"):
        inside = any(q.start() <= m.start() and m.end() <= q.end() for q in qualified)
        if not inside and _number(m) not in (total, total - practice):
            adaptive = f" ({facts['adaptive']} of them adaptive, QUEST+, at most)" if facts["adaptive"] else ""
            found.append((m.group(0), f"a participant answers {total}{adaptive}"))
    for key, wrong in (("claim_one_practice", practice != 1), ("claim_no_practice", practice != 0)):
        found += [(m.group(0), f"the experiment has {practice} practice trials") for m in find(key)[:1] if wrong]
    breaks = [(m, _number(m)) for m in find("claim_breaks")] + [(m, 0) for m in find("claim_no_breaks")]
    found += [(m.group(0), f"a participant gets {facts['breaks']} breaks") for m, n in breaks if n != facts["breaks"]]
    windows = facts["windows"]
    limits = " or ".join(sorted(seconds(w) for w in windows if w is not None)) or "no time limit"
    if None not in windows:
        found += [(m.group(0), f"the answer must come within {limits}") for m in find("claim_no_time_limit")[:1]]
    found += [(m.group(0), f"the experiment allows {limits}") for m in find("claim_answer_seconds")
              if round(_number(m) * 1000) not in windows]
    found += [(m.group(0), f"the trials and breaks take about {facts['minutes']} minutes")
              for m in find("claim_minutes") if abs(_number(m) - facts["minutes"]) > max(2, facts["minutes"] / 4)]
    return found


def contradictions(expdir: ExperimentDir, experiment: Experiment) -> list[str]:
    """Every claim in the texts of the study's language about the trial count, practice, time limit, breaks or
    duration that the experiment contradicts, as ``texts/NAME.md:LINE: "WORDS", but FACT``."""
    facts, language = study_facts(experiment), experiment.language
    out = []
    for name in NAMES:
        path = text_path(expdir, name, language)
        if path.exists():
            where = path.relative_to(expdir.root).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                out += [f'{where}:{number}: "{words}", but {fact}' for words, fact in _claims(line, facts, language)]
    return out


ALLOW_FLAG = "--allow-text-mismatch"


def check_texts(expdir: ExperimentDir, experiment: Experiment) -> None:
    """Bring the texts up to the experiment (``refresh_texts``), then refuse to run a study whose texts
    contradict it (``contradictions``), naming the lines to fix; the runners' :data:`ALLOW_FLAG` skips
    this for a researcher who has checked them."""
    refresh_texts(expdir, experiment)
    problems = contradictions(expdir, experiment)
    if problems:
        folder = texts_dir(expdir, experiment.language).relative_to(expdir.root).as_posix()
        raise TextsContradictError(
            f"{expdir.root.name}/{folder}/ contradicts experiment.json in {len(problems)} place(s); fix these lines "
            f"(or delete an unedited file to get this build's default), or pass {ALLOW_FLAG} to run anyway:\n  "
            + "\n  ".join(problems))


PLACEHOLDER = re.compile(r"\[\[([^\[\]]+?)\]\]")
"""A field the researcher fills in: ``[[researcher: name, institution and an e-mail address]]`` (the default
consent's contact, purpose, ethics approval, risks and data retention: what only the researcher knows)."""
PILOT_FLAG = "--pilot-only"


class TextsUnfilledError(CuebenchError):
    """A text still holds a placeholder, which no participant may read."""


def placeholders(expdir: ExperimentDir, language: str = LANGUAGE) -> dict[str, list[str]]:
    """``texts/NAME.md`` -> the names of the placeholders it still holds (the words before each ``:``), for the
    texts of ``language`` that hold any."""
    out = {}
    for name in NAMES:
        path = text_path(expdir, name, language)
        found = PLACEHOLDER.findall(path.read_text(encoding="utf-8")) if path.exists() else []
        if found:
            out[path.relative_to(expdir.root).as_posix()] = [f.split(":", 1)[0].strip() for f in found]
    return out


def check_filled(expdir: ExperimentDir, experiment: Experiment) -> None:
    """Refuse to show participants a text whose placeholders are not filled in (an ethics board's fields of
    the default consent), in one line naming them; :data:`PILOT_FLAG` serves the research team's pilot codes
    only, who may read the draft."""
    refresh_texts(expdir, experiment)
    unfilled = placeholders(expdir, experiment.language)
    if unfilled:
        where = "; ".join(f"{expdir.root.name}/{path}: {', '.join(names)}" for path, names in unfilled.items())
        raise TextsUnfilledError(f"fill in the [[...]] placeholders before participants read them ({where}), or "
                                 f"serve pilot entry codes only ({PILOT_FLAG})")


def to_html(markdown: str) -> str:
    """Markdown as HTML (CommonMark; raw HTML is shown escaped, never run)."""
    return _markdown().render(markdown)


@lru_cache(maxsize=1)
def _markdown():
    """One parser for every text: building one costs more than rendering a text with it, and rendering
    keeps no state in it (so threads share it)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})


def plain(expdir: ExperimentDir, name: str, language: str = LANGUAGE) -> str:
    """The text for a screen that shows plain text (the PsychoPy lab runner): Markdown marks dropped."""
    lines = text_path(expdir, name, language).read_text(encoding="utf-8").splitlines()
    return "\n".join(line.lstrip("#").strip().replace("**", "") for line in lines).strip()
