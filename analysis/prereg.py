"""A preregistration written from the study itself (``cuebench prereg``).

Journals ask for a preregistration; writing one by hand restates what the study folder already holds, and
every restatement can drift from what runs. Here each section is built from the records the methods
paragraph uses (:mod:`analysis.sections.methods`): the design as built (:func:`analysis.design_record.
experiment_record` and the same design and stimulus sentences), the trials' timing from ``experiment.json``,
the exclusion rules exactly as ``cuebench analyze`` applies them with the same options
(:meth:`analysis.exclusions.ExclusionOptions.rules`), the sample size from ``cuebench plan`` on a pilot with its
assumptions, and, with a pilot, the very sentences each report section records of the tests it ran. What only
the researcher can say (the hypotheses, blinding, the theory) is marked ``TO WRITE``.

Two forms: the sections of the OSF Preregistration template (Bowman et al. 2020, "OSF Prereg Template",
doi:10.31222/osf.io/epgjd) and the nine questions of AsPredicted (aspredicted.org).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cuebench.expdir import ExperimentDir
from cuebench.errors import CuebenchError

from .design_record import experiment_record
from .sections.methods import design_sentences, stimuli_sentence

TO_WRITE = "**TO WRITE:**"
FORMATS = ("osf", "aspredicted")
PHASES = (("fixation", "fixation"), ("stimulus", "stimulus"), ("mask", "mask"),
          ("response_window", "response window"), ("iti", "inter-trial interval"))


class PreregError(CuebenchError, ValueError):
    """The preregistration cannot be written as asked."""


@dataclass
class SampleSize:
    """How many people, and why: a plan from a pilot (its lines), or the study's recruitment target."""

    n: int | None
    rationale: list[str]
    stopping: str


@dataclass
class Preregistration:
    title: str
    sections: dict[str, list[str]] = field(default_factory=dict)

    def markdown(self) -> str:
        lines = [f"# Preregistration: {self.title}", ""]
        for heading, paragraphs in self.sections.items():
            lines += [f"## {heading}", "", *(p + "\n" for p in paragraphs)]
        return "\n".join(lines).rstrip() + "\n"


def timing_sentences(experiment) -> list[str]:
    """The planned phase durations of the test trials, one sentence per distinct timing (a study mixing
    classification and oddity trials has two)."""
    timings = Counter((t.trial_type, t.timing.model_dump_json()) for t in experiment.trials if t.role == "test")
    out = []
    for (trial_type, _), count in sorted(timings.items()):
        timing = next(t.timing for t in experiment.trials if t.role == "test" and t.trial_type == trial_type)
        phases = [f"{name} {getattr(timing, key)} ms" for key, name in PHASES
                  if getattr(timing, key) is not None and key != "response_window"]
        window = ("no response window" if timing.response_window is None else
                  f"a response window of {timing.response_window} ms from "
                  + ("stimulus onset" if timing.response_from_onset else "response-screen onset"))
        out.append(f"{count} {trial_type} test trial(s): {', '.join(phases)}; {window}.")
    return out


def planned_sample(scored, pilot: Path, options, effect: float, power: float, sims: int, max_n: int) -> SampleSize:
    """N from ``cuebench plan`` on the pilot's scored trials (``scored``), with every assumption the plan states."""
    from .plan import plan

    result = plan(scored, effect, power, options.alpha, sims=sims, max_n=max_n, seed=options.seed)
    stopping = (f"Recruitment stops when {result.n} people who meet the exclusion rules have finished."
                if result.n else f"{TO_WRITE} the plan found no N up to {max_n}; say how the study is changed.")
    return SampleSize(result.n, [f"From `cuebench plan` on the pilot {pilot.name} (effect {effect:+g}, "
                                 f"power {power:g}):", *(f"    {line}" for line in result.lines())], stopping)


def target_sample(target: int) -> SampleSize:
    """N from the study's stored recruitment target (``cuebench serve --target-n``, kept in its rules.json)."""
    return SampleSize(target, [f"{TO_WRITE} the rationale for N (`cuebench prereg --pilot PILOT --effect E` computes "
                               "one from a pilot with `cuebench plan`)."],
                      f"the server closes the study once {target} sessions count (finished, neither pilot nor "
                      "excluded; the study's stored rule `target_n`, rules.json), so recruitment stops there.")


def preregistration(expdir: str | Path, options=None, sample: SampleSize | None = None,
                    models: list[str] | None = None, tests: list[str] | None = None) -> Preregistration:
    """The preregistration of the study in ``expdir`` (module docstring): ``options`` are the analysis options
    ``cuebench analyze`` will run with; ``sample`` the planned N; ``models`` the models compared; ``tests`` the
    sentences the report's sections recorded on a pilot (None: stated from the options alone)."""
    from .report import AnalysisOptions

    options = options or AnalysisOptions()
    folder = ExperimentDir(expdir)
    experiment = folder.load()
    record = experiment_record(experiment)
    exclusions = options.exclusions
    prereg = Preregistration(experiment.name)
    prereg.sections["Study information"] = [
        f"Title: {experiment.name} ({experiment.design} design, built with cuebench; `experiment.json` is archived "
        "with this registration).",
        f"{TO_WRITE} the research question and its background.",
        f"Hypotheses: {TO_WRITE} each hypothesis, its direction, and which test below decides it."]
    counterbalancing = ("Assignment to groups fills the least-filled group first (web server and lab alike)."
                        if record.get("assignment") else "Every person sees every trial.")
    prereg.sections["Design plan"] = [
        "Study type: experiment (people and ImageNet models answer the same trials).",
        f"Blinding: {TO_WRITE} (people do not learn their group or condition; the analysis is run by the "
        "documented command, not by hand).",
        *design_sentences(record), stimuli_sentence(record["conditions"]), *timing_sentences(experiment),
        f"Counterbalancing: {counterbalancing} The trial order of each person follows the experiment's seeded "
        "schedule."]
    if sample is None:
        sample = SampleSize(None, [f"{TO_WRITE} N and its rationale (`cuebench prereg --pilot PILOT --effect E` "
                                   "writes it from a pilot with `cuebench plan`)."],
                            f"{TO_WRITE} the stopping rule.")
    prereg.sections["Sampling plan"] = [
        "Existing data: registration before any data of the main study were collected; the pilot named below is "
        "not part of the main study's data." if sample.n else
        "Existing data: registration before any data of the main study were collected.",
        "Data collection: online (`cuebench serve`, e.g. through Prolific) and/or in the lab (`cuebench lab run`).",
        f"Sample size: {sample.n} people." if sample.n else f"Sample size: {TO_WRITE}",
        *sample.rationale, f"Stopping rule: {sample.stopping}"]
    prereg.sections["Variables"] = [
        "Manipulated: " + stimuli_sentence(record["conditions"]),
        "Measured, per trial: the answer (`response`), whether it is correct (`correct`, 1/0) and the response time "
        "(`rt_ms`, ms); the data dictionary is the response schema (`cuebench schema response`).",
        "Indices: accuracy per observer, condition and level, and the report's derived measures for this design."]
    analyses = (["the tests the report runs, as its sections state them on the pilot (counts are the pilot's):",
                 *tests] if tests else [
        f"Human and model accuracy are compared per model, condition and level by two-sided t-tests paired by "
        f"{options.pairing}, {options.correction}-corrected over the family at alpha {options.alpha:g}, with "
        f"effect sizes and {options.n_boot}-resample bootstrap intervals (seed {options.seed}); the exact tests are "
        "listed here when a pilot is given."])
    prereg.sections["Analysis plan"] = [
        "Statistical models: " + " ".join(analyses),
        "Models compared: " + (", ".join(models) if models else f"{TO_WRITE} the models (`cuebench eval`)."),
        f"Inference criteria: two-sided tests at alpha {options.alpha:g} after {options.correction} correction "
        "over the family of tests; intervals are 95 %.",
        "Data exclusion: " + "; ".join(exclusions.rules()) + ".",
        "Missing data: " + ("trials without an answer are left out, the rest of the person's trials kept."
                            if exclusions.timeouts == "exclude" else "trials without an answer are scored wrong."),
        f"Exploratory analyses: {TO_WRITE} anything beyond the tests above is reported as exploratory."]
    return prereg


def aspredicted(prereg: Preregistration) -> str:
    """The nine AsPredicted questions, answered from the same sections."""
    s = prereg.sections
    design, sampling, variables, analysis = (s["Design plan"], s["Sampling plan"], s["Variables"],
                                             s["Analysis plan"])
    answers = [
        ("Data collection. Have any data been collected for this study already?", [sampling[0]]),
        ("Hypothesis. What's the main question being asked or hypothesis being tested?", s["Study information"][1:]),
        ("Dependent variable. Describe the key dependent variable(s).", variables[1:2]),
        ("Conditions. How many and which conditions will participants be assigned to?", design[2:]),
        ("Analyses. Specify exactly which analyses you will conduct.", [analysis[0], analysis[2]]),
        ("Outliers and Exclusions. Describe exactly how outliers will be defined and handled.", analysis[3:5]),
        ("Sample Size. How many observations will be collected?", sampling[2:]),
        ("Other. Anything else you would like to pre-register?", [analysis[1], analysis[5]]),
        ("Name. Give a title for this AsPredicted pre-registration.", [prereg.title]),
    ]
    lines = [f"# AsPredicted: {prereg.title}", ""]
    for number, (question, paragraphs) in enumerate(answers, start=1):
        lines += [f"## {number}) {question}", "", *(p + "\n" for p in paragraphs)]
    return "\n".join(lines).rstrip() + "\n"
