"""Pieces every design needs: label sets, provenance, attention trials, the finished experiment."""

from __future__ import annotations

import hashlib
import math
import platform
import random
import re
import sys
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from cuebench.version import __version__
from cuebench.adaptive import plan_for_grid, stimulus_axis
from cuebench.labels import IMAGENET16, IMAGENET16_NAME, category_labels, imagenet_mapping, single_answer
from ..build import BuildError, BuildReport, SourceJob, Task, run_jobs, stimulus_seed
from cuebench.counterbalance import latin_square_plan
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Schedule, Timing, Trial, standard_timing
from cuebench.label_names import named
from cuebench.words import LANGUAGE, say, with_article, words
from ..options import OptionError, parse_timing
from ..sources import DEFAULT_LABEL_INDICES, SourceImage, resolve_images


def label_set_for(sources: list[SourceImage], common) -> LabelSet:
    """The answer labels: the 16 ImageNet entry-level classes when the images use them,
    the embedded default's labels (with their ImageNet indices), or the folder's classes with
    the ImageNet classes their names match (``cuebench.labels.imagenet_mapping``); named on the buttons in
    the study's language (``cuebench.label_names``)."""
    categories = sorted({label for s in sources for label in category_labels(s.category)})
    if not categories:
        raise BuildError(f"images from {common.images!r} have no classes: use a folder with one sub-folder per "
                         "class, or a flat folder with --labels labels.csv (columns image,category)")
    if set(categories) <= set(IMAGENET16):
        labels = LabelSet(IMAGENET16_NAME, IMAGENET16)
    elif common.images == "default":
        labels = LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=dict(DEFAULT_LABEL_INDICES))
    else:
        labels = LabelSet("custom", tuple(categories), imagenet_indices=imagenet_mapping(categories))
    return shown_in_language(labels, common)


def shown_in_language(labels: LabelSet, common) -> LabelSet:
    """``labels`` named in ``--language`` (``--label-names``, else the catalogue's ImageNet-16 names); a note
    when a study in another language than English would show some classes under their folder names."""
    labels = named(labels, common.language, common.label_names)
    untranslated = [label for label in labels.labels if label not in labels.shown]
    if common.language != LANGUAGE and untranslated:
        print(f"note: the answer buttons of this {common.language} study show "
              f"{', '.join(untranslated[:4])}{' ...' if len(untranslated) > 4 else ''} as the class folders name "
              f"them; give their {common.language} names with --label-names FILE (docs/labelled_sets.md)",
              file=sys.stderr)
    return labels


def build_provenance(request) -> dict:
    """How the experiment was made: command, the design's own and the common options, versions (no
    timestamp, so a rebuild with the same inputs writes the same experiment.json)."""
    import cv2
    import PIL

    from . import portable, recorded_options

    return {
        "design": request.design,
        "command": "cuebench " + " ".join(map(portable, sys.argv[1:])) if sys.argv and "cuebench" in sys.argv[0]
        else None,
        "options": recorded_options(request.design, request.options, request.common),
        "software": {"cuebench": __version__, "python": platform.python_version(), "numpy": np.__version__,
                     "pillow": PIL.__version__, "opencv": cv2.__version__},
        **({"display": display_geometry(request.common)} if request.common.stimulus_degrees else {}),
    }


def display_geometry(common) -> dict:
    """The stimulus size in degrees of visual angle and the lab geometry it was planned for; the pixel width
    a runner shows it at follows from its screen's pixels per cm: 2 d tan(deg / 2) cm."""
    width_cm = 2 * common.viewing_distance * math.tan(math.radians(common.stimulus_degrees) / 2)
    return {"stimulus_degrees": common.stimulus_degrees, "viewing_distance_cm": common.viewing_distance,
            "screen_width_cm": common.screen_width, "stimulus_width_cm": round(width_cm, 4)}


def attention_trials(label_set: LabelSet, originals: list[tuple[str, str, str]], seed: int,
                     timing: Timing = standard_timing("classify"), language: str = LANGUAGE) -> list[Trial]:
    """Burgert et al. 2025, appendix E.2: "you will see an A; click B". ``originals`` are
    (source image, stimulus id, category A) of check photos from outside the study's set (``study_checks``),
    one trial each, so a check never shows the intact original of a photo the person sees suppressed; B is
    another label, drawn by seed without repeats until every label has been used, so the instructed answer
    moves over the response grid. The image is an original photo of class A, a label of the study or an
    ImageNet-16 class named by the catalogue: the check tests reading, not recognition. The instruction is in the
    study's ``language``."""
    rng = random.Random(seed)
    catalogue = words(language)

    def name(label: str) -> str:
        return label_set.name_of(label) if label in label_set.labels else catalogue.get(f"class_{label}", label)

    labels = [lab for lab in label_set.displayed() if lab != NOT_CLEAR]
    answers: list[str] = []
    trials = []
    for k, (source, sid, a) in enumerate(originals):
        if not [lab for lab in answers if lab != a]:
            answers = rng.sample(labels, len(labels))
        b = next(lab for lab in answers if lab != a)
        answers.remove(b)
        trials.append(Trial(
            trial_id=f"attention-{k + 1:03d}", trial_type="classify", role="attention", stimuli=(sid,),
            choices=tuple(label_set.displayed()), correct=b, condition="attention", source_image=source,
            category=a, timing=timing,
            instruction=say("attention_classify", language, shown=with_article(name(a), language), answer=name(b)),
        ))
    return trials


CLASSIFY_SCHEDULE = Schedule(break_every=100, attention_every=100, catch_every=None)
"""Burgert et al. 2025: an attention test every 100 trials; a break every 100."""


def attention_every(common) -> int:
    """``--attention N``, or Burgert et al.'s one check every 100 trials; 0 for none."""
    return CLASSIFY_SCHEDULE.attention_every if common.attention is None else common.attention


def classify_schedule(common) -> Schedule:
    return CLASSIFY_SCHEDULE.model_copy(update={"attention_every": attention_every(common) or None})


def slug(name: str) -> str:
    """A source name as a trial-id part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


Arm = tuple[str, "int | None", dict]  # (condition, level on its grid, params)


def adaptive_plans(specs: list[str], plan: list[Arm], n_labels: int) -> tuple:
    """QUEST+ blocks from ``--adaptive COND:TRIALS[:PRIOR_MEAN:PRIOR_SD]`` over the conditions being built:
    the condition's grid levels, its stimulus axis (``cuebench.adaptive.stimulus_axis``) and guess rate 1/C.
    Checked before any stimulus is made, so a bad block leaves nothing behind."""
    plans = []
    for spec in specs:
        parts = spec.split(":")
        try:
            if len(parts) not in (2, 4):
                raise ValueError
            condition, trials = parts[0], int(parts[1])
            prior = (float(parts[2]), float(parts[3])) if len(parts) == 4 else (None, None)
        except ValueError:
            raise BuildError(f"--adaptive {spec!r}: expected CONDITION:TRIALS or CONDITION:TRIALS:PRIOR_MEAN:PRIOR_SD "
                             "(e.g. patch_shuffle:40)") from None
        params = {level: p for cond, level, p in plan if cond == condition and level is not None}
        if not params:
            raise BuildError(f"--adaptive {spec!r}: condition {condition!r} is not among the conditions built "
                             f"({', '.join(sorted({c for c, _, _ in plan}))})")
        axis, values = stimulus_axis(params)
        plans.append(plan_for_grid(condition, list(values), list(values.values()), axis, 1 / n_labels,
                                           trials, prior_mean=prior[0], prior_sd=prior[1]))
    return tuple(plans)


def checks_per_person(tests: int, every: int) -> int:
    """How many checks a schedule of one after every ``every`` test trials puts in a sequence of ``tests``
    (``cuebench.counterbalance.participant_sequence``: one per full ``every``, and one when there are fewer)."""
    return max(1, tests // every) if every else 0


@dataclass(frozen=True)
class HeldOut:
    """The photos a study shows, by use: ``tests`` (the scored trials) and the practice, catch and attention
    photos, never one of a person's test photos (it would prime the test)."""

    tests: list
    practice: list
    catch: list
    attention: list


def by_class_in_turn(sources: list[SourceImage], seed: int) -> list[SourceImage]:
    """The sources in a seeded order that takes one photo of each class in turn, so the first few held out
    (and the attention checks naming them) differ in class. Classes and photos are ranked by a hash of the
    seed and their name, so adding photos or classes moves few of those held out (a rebuild reuses stimuli)."""
    def rank(name: str) -> str:
        return hashlib.sha256(f"{seed}:held out:{name}".encode()).hexdigest()

    classes: dict[str, list[SourceImage]] = {}
    for src in sorted(sources, key=lambda s: rank(s.name)):
        classes.setdefault(src.category or "", []).append(src)
    order = sorted(classes, key=rank)
    return [classes[c][k] for k in range(max(map(len, classes.values()), default=0)) for c in order
            if k < len(classes[c])]


def study_checks(sources: list[SourceImage], label_set: LabelSet | None, common, catch_every: int = 0,
                 trials_per_photo: int = 1, excluded: frozenset[str] = frozenset(),
                 catch_asked: bool = True) -> HeldOut:
    """Every source photo a test photo, so a study's set stays whole (a published set is scored on all its
    images); practice, catch and attention trials show check photos from outside it: ``--check-images``, else
    the bundled ones (``stimuli.sources.check_images``) that are not among the study's (nor ``excluded``,
    ``run_with_checks``). A practice or catch
    photo is of one of the study's classes (its answer is a button); an attention check tests reading, not
    recognition ("the next image shows a clock; click cat"), so it may show any ImageNet-16 class the
    catalogue names in the study's language. Where the answer is not the photo's class (``label_set`` None: an
    oddity trial's answer is a position) any check photo serves any check. Each check a person sees has a photo
    of its own (``checks_per_person``). Too few photos: refused, naming ``--check-images``, for the checks asked
    for; checks a design adds by default (attention checks; catch trials where ``catch_asked`` is False) are
    left out with a note."""
    from ..sources import check_images

    builtin = {s.origin for s in sources if s.origin.startswith("builtin:")}
    pool = [p for p in check_images(common.check_images) if p.origin not in builtin and p.name not in excluded]
    where = f"--check-images {common.check_images} holds" if common.check_images else \
        f"the bundled check photos ({', '.join(p.category for p in pool) or 'none left: the study uses them'}) hold"
    folders = "one sub-folder per class" + (f", e.g. {', '.join(label_set.labels[:3])}" if label_set else "")
    answerable = by_class_in_turn([p for p in pool if label_set is None or p.category in label_set.labels],
                                  common.seed)
    kind = "from outside the study" if label_set is None else "of the study's classes from outside its images"
    tests = len(sources) * trials_per_photo
    practice, catches = common.practice, checks_per_person(tests, catch_every)
    if practice + catches > len(answerable):
        asked = " + ".join(f"{n} {what}" for n, what in ((practice, "practice (--practice)"),
                                                          (catches, "catch (--catch-every)")) if n)
        message = f"{asked} trial(s) need as many photos {kind}, and {where} {len(answerable)}"
        if catch_asked or practice > len(answerable):
            raise OptionError(f"{message}: give --check-images DIR ({folders})")
        print(f"note: no catch trials: {message}: give --check-images DIR ({folders}), or --catch-every 0 to "
              "leave them out on purpose", file=sys.stderr)
        catches = 0
    others = [] if label_set is None else [p for p in pool if p.category not in label_set.labels
                                           and p.category in IMAGENET16]
    spare = by_class_in_turn(others, common.seed) + answerable[practice + catches:]
    attentions = checks_per_person(tests, attention_every(common))
    if attentions > len(spare):
        message = (f"{attentions} attention check(s) (--attention {attention_every(common)}) need as many photos "
                   f"from outside the study's images; {where} {len(spare)} to spare: give --check-images DIR "
                   "(one sub-folder per class)")
        if common.attention is not None:
            raise OptionError(message)
        print(f"note: no attention checks: {message}, or --attention 0 to leave them out on purpose", file=sys.stderr)
        attentions = 0
    return HeldOut(list(sources), answerable[:practice], answerable[practice:practice + catches], spare[:attentions])


def run_with_checks(expdir, jobs: list[SourceJob], held: HeldOut, again: Callable[[frozenset[str]], HeldOut], common,
                    existing) -> tuple[BuildReport, HeldOut]:
    """``run_jobs`` over the study's ``jobs`` and the check photos' originals, keeping the check photos apart from
    the study's: one with the pixels of a study photo would show people an intact test image (and prime it).
    Compared on the stored 224 x 224 originals (deterministic PNGs). From ``--check-images`` that is refused,
    naming both; a bundled one (in a study of scikit-image's own photos) gives way to another: ``again(names)``
    picks the checks without those."""
    def originals(checks: HeldOut) -> list[SourceJob]:
        return [SourceJob(src, [Task("original", {}, None)]) for src in checks.practice + checks.catch + checks.attention]

    def digest(src: SourceImage) -> str | None:
        stim = report.get(src, Task("original", {}, None))
        return None if stim is None else hashlib.sha256(expdir.stimulus_path(stim).read_bytes()).hexdigest()

    report = run_jobs(expdir, jobs + originals(held), workers=common.workers, on_error=common.on_error,
                      existing=existing)
    study: dict[str, SourceImage] | None = None
    excluded: set[str] = set()
    while checks := {d: src for src in held.practice + held.catch + held.attention if (d := digest(src))}:
        study = study if study is not None else {d: src for src in held.tests if (d := digest(src))}
        twins = [(check, study[d]) for d, check in checks.items() if d in study]
        if not twins:
            break
        if common.check_images:
            check, photo = twins[0]
            raise BuildError(f"check photo {check.origin} is the study's image {photo.origin}: practice, catch and "
                             "attention trials show photos from outside the study (--check-images)")
        excluded |= {check.name for check, _ in twins}
        held = again(frozenset(excluded))
        report.stimuli.update(run_jobs(expdir, originals(held), workers=1, on_error=common.on_error,
                                       progress=False).stimuli)
    return report, held


def held_originals(photos: list[SourceImage], report, failed: set[str], stimuli: dict) -> list[tuple[str, str, str]]:
    """(source image, stimulus id, category) of the held-out photos the workers made unchanged (``run_jobs``'s
    ``report``), each added to ``stimuli``: what ``attention_trials`` shows."""
    out = []
    for src in photos:
        if src.name not in failed:
            stim = report.get(src, Task("original", {}, None))
            stimuli[stim.id] = stim
            out.append((src.name, stim.id, src.category))
    return out


def study_timing(common, base: Timing) -> Timing:
    """The design's standard timing with ``--timing`` applied."""
    return parse_timing(common.timing, base) if common.timing else base


def unchanged_trials(role: str, label_set: LabelSet, made: list[tuple[SourceImage, str]], timing: Timing,
                     seed: int) -> list[Trial]:
    """``classify`` trials of unchanged held-out photos: ``practice`` (the runners give feedback) or ``catch``
    (a known answer that checks the task is done as meant); neither enters accuracy."""
    return [Trial(trial_id=f"{role}--{slug(src.name)}", trial_type="classify", role=role, stimuli=(sid,),
                  choices=tuple(label_set.displayed()), correct=single_answer(src.category), condition=role,
                  source_image=src.name, category=src.category, timing=timing,
                  mask_seed=stimulus_seed(seed, src.name, f"mask:{role}", {}))
            for src, sid in made]


def grid_experiment(request, plan: list[Arm], fn: str, seed_for: Callable[[str, str, dict], int | None],
                    original_trials: bool, adaptive_specs: list[str] = ()) -> Experiment:
    """Every source image under every (condition, level) of ``plan``, one ``classify`` trial
    each, made by the per-image transform ``fn`` in parallel; the arms rotate over
    participant groups as a Latin square, with attention checks every 100 trials (``--attention``).

    ``original_trials`` adds the unchanged image as condition ``original`` (the baseline of
    relative accuracy); grids whose level 0 is the unchanged image leave it out. Conditions with an
    adaptive block (``adaptive_specs``) keep their trials at every level but leave the Latin square:
    QUEST+ chooses among them per observer. ``--practice`` and ``--catch-every`` show check photos
    (``study_checks``) unchanged.
    """
    common, expdir = request.common, request.expdir
    sources = resolve_images(common.images, common.labels, common.only)
    label_set = label_set_for(sources, common)
    timing = study_timing(common, standard_timing("classify"))
    adaptive = adaptive_plans(list(adaptive_specs), plan, len(label_set.labels))
    adaptive_conditions = {p.condition for p in adaptive}
    catch_every = common.catch_every or 0
    pick = partial(study_checks, sources, label_set, common, catch_every)
    held = pick()
    jobs = [SourceJob(src, [Task("original", {}, None)] +
                      [Task(cond, params, seed_for(src.name, cond, params), fn) for cond, _, params in plan])
            for src in sources]
    existing = expdir.load() if expdir.exists() else None
    report, held = run_with_checks(expdir, jobs, held, lambda excluded: pick(excluded=excluded), common, existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    arms = ([("original", None, {})] if original_trials else []) + list(plan)
    stimuli, trials = {}, []
    for job in jobs[:len(sources)]:
        src = job.source
        if src.name in failed:
            continue
        made = [report.get(src, task) for task in job.tasks]
        stimuli.update((stim.id, stim) for stim in made)
        for stim, (cond, level, params) in zip(made if original_trials else made[1:], arms):
            trials.append(Trial(
                trial_id=f"{slug(src.name)}--{cond}" + ("" if level is None else f"--{level}"),
                trial_type="classify", role="test", stimuli=(stim.id,), choices=tuple(label_set.displayed()),
                correct=single_answer(src.category), condition=cond, params=params, level=level, source_image=src.name,
                category=src.category, timing=timing,
                mask_seed=stimulus_seed(common.seed, src.name, f"mask:{cond}", {"level": level}),
            ))
    if not trials:
        raise BuildError("no stimuli were made: every source image failed")
    for role, photos in (("practice", held.practice), ("catch", held.catch)):
        made = [(src, report.get(src, Task("original", {}, None))) for src in photos if src.name not in failed]
        stimuli.update((stim.id, stim) for _, stim in made)
        trials += unchanged_trials(role, label_set, [(src, stim.id) for src, stim in made], timing, common.seed)
    trials += attention_trials(label_set, held_originals(held.attention, report, failed, stimuli), common.seed,
                               timing, common.language)
    print(f"stimuli: {report.made} made, {report.reused} already there, {len(report.failed)} source images skipped")
    schedule = classify_schedule(common).model_copy(update={"catch_every": catch_every or None})
    return Experiment(
        name=request.name, design=request.design, label_set=label_set, stimuli=stimuli, trials=trials,
        schedule=schedule,
        assignment=latin_square_plan([t for t in trials if t.role == "test" and t.condition not in adaptive_conditions]),
        provenance={**build_provenance(request), "skipped_images": report.failed}, adaptive=adaptive,
    )
