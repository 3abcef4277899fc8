"""Counterbalancing: the Latin-square assignment plan and each participant's trial sequence (how trials
are spread over people, not how stimuli are made: that is a design in ``stimuli/designs/``).

The web server and the PsychoPy runner both call ``participant_sequence`` so a
participant gets the same trials in the same order whichever runner shows them, and
a resumed session continues the identical sequence.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass

from .adaptive import ObserverBlock, session_name
from .trials import AssignmentPlan, Experiment, SchemaError, Trial


def arm_of(trial: Trial) -> str:
    """The assignment arm of a test trial: its condition and parameter level."""
    return trial.condition if trial.level is None else f"{trial.condition}@{trial.level}"


def latin_square_plan(trials: list[Trial], arms: list[str] | None = None) -> AssignmentPlan:
    """Rotate arms over groups so each participant sees each source image once.

    Burgert et al. 2025 (human study): K conditions, K groups; group g sees image i in
    arm (i + g) mod K. Every image must have exactly one test trial per arm; otherwise
    the design is not a Latin square and we say which image breaks it.
    """
    tests = [t for t in trials if t.role == "test"]
    by_image: dict[str, dict[str, Trial]] = defaultdict(dict)
    for t in tests:
        key = t.source_image or t.trial_id
        arm = arm_of(t)
        if arm in by_image[key]:
            raise SchemaError("trials", f"source image {key!r} has two test trials in arm {arm!r}")
        by_image[key][arm] = t
    all_arms = sorted({arm_of(t) for t in tests}) if arms is None else list(arms)
    images = sorted(by_image)
    for image in images:
        missing = [a for a in all_arms if a not in by_image[image]]
        if missing:
            raise SchemaError("trials", f"source image {image!r} has no trial in arm {missing[0]!r}; "
                                        "a Latin square needs one trial per image and arm")
    k = len(all_arms)
    groups = []
    for g in range(k):
        groups.append(tuple(by_image[image][all_arms[(i + g) % k]].trial_id for i, image in enumerate(images)))
    return AssignmentPlan(arms=tuple(all_arms), images=tuple(images), groups=tuple(groups))


def everyone_plan(trials: list[Trial]) -> AssignmentPlan:
    """One group that sees every test trial (e.g. DiST, where each image has one trial)."""
    tests = tuple(t.trial_id for t in trials if t.role == "test")
    return AssignmentPlan(arms=("all",), images=(), groups=(tests,))


def participant_seed(experiment: str, participant: str, session: str | int = "1") -> int:
    """A stable 63-bit seed for a participant's order, independent of Python's hash salt."""
    digest = hashlib.sha256(f"{experiment}\x00{participant}\x00{session}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class ScheduledTrial:
    index: int  # 0-based position in the sequence (the response key)
    trial_id: str
    block: int  # 0 = practice; 1.. = main blocks
    break_before: bool  # show a break screen before this trial


def participant_sequence(experiment: Experiment, group: int, participant: str, session: str | int = "1") -> list[ScheduledTrial]:
    """The full ordered sequence for one participant: practice, then test trials of the
    participant's group in a seeded random order with catch and attention trials inserted
    per the schedule, broken into blocks."""
    if experiment.assignment is None:
        raise SchemaError("assignment", f"experiment {experiment.name!r} has no assignment plan")
    groups = experiment.assignment.groups
    if not 0 <= group < len(groups):
        raise SchemaError("assignment.groups", f"group {group} does not exist (0..{len(groups) - 1})")
    sched = experiment.schedule
    rng = random.Random(participant_seed(experiment.name, participant, session))
    tests = list(groups[group])
    if sched.shuffle:
        rng.shuffle(tests)
    catches = [t.trial_id for t in experiment.trials_with_role("catch")]
    attentions = [t.trial_id for t in experiment.trials_with_role("attention")]
    rng.shuffle(catches)
    rng.shuffle(attentions)
    main: list[str] = []
    for n, tid in enumerate(tests, start=1):
        main.append(tid)
        if sched.catch_every and catches and n % sched.catch_every == 0:
            main.append(catches[(n // sched.catch_every - 1) % len(catches)])
        if sched.attention_every and attentions and n % sched.attention_every == 0:
            main.append(attentions[(n // sched.attention_every - 1) % len(attentions)])
    if sched.attention_every and attentions and len(tests) < sched.attention_every:
        main.insert(rng.randrange(1, len(main) + 1) if main else 0, attentions[0])
    if sched.catch_every and catches and len(tests) < sched.catch_every:
        main.insert(rng.randrange(1, len(main) + 1) if main else 0, catches[0])
    practice = [t.trial_id for t in experiment.trials_with_role("practice")] if sched.practice_first else []
    out: list[ScheduledTrial] = []
    for tid in practice:
        out.append(ScheduledTrial(len(out), tid, 0, False))
    for n, tid in enumerate(main):
        block = 1 + (n // sched.break_every if sched.break_every else 0)
        out.append(ScheduledTrial(len(out), tid, block, n > 0 and sched.break_every is not None and n % sched.break_every == 0))
    return out


def adaptive_blocks(experiment: Experiment, store, observer: str, observer_kind: str) -> list[ObserverBlock]:
    """The observer's QUEST+ blocks (``cuebench.adaptive``), each resumed from its answers in ``store``
    (a ``ResponseStore``), with the lapse prior of ``observer_kind``; every runner shows them after the fixed
    sequence."""
    blocks = []
    for plan in experiment.adaptive:
        session = session_name(plan.condition)
        stored = store.rows("experiment = ? AND observer = ? AND session = ?", [experiment.name, observer, session])
        blocks.append(ObserverBlock(plan, observer_kind, experiment.adaptive_trials(plan.condition), stored,
                                    participant_seed(experiment.name, observer, session)))
    return blocks
