"""Models answer an experiment's trials, batched, resumable, into the experiment's response store.

The loop knows models only through the Observer protocol (``observers.base``): it feeds
normalised image batches, asks for the output kinds the trials' decision rules read
(``decisions.DecisionTable``, one rule per trial type), and stores the observer's answers.

Every trial (test, practice, catch, attention) is answered and stored with its role, as a
person's answer would be; accuracy summaries count only the scored (``test``) trials.
Stimuli are decoded once per experiment into a uint8 cache (``stimulus_cache.py``) that
every later run and every other model reads; each unique stimulus goes through a model
once, resized, cropped and normalised in its batch on the model's device
(``preprocess.DevicePreprocess``), each batch gathered from the cache ahead of time by a
background thread, and its answers decided and stored behind the model by another
(``batch_loader.py``). The model runs channels-last; on a GPU under bfloat16
autocast, fed from pinned memory without blocking; on a CPU freed activation memory is kept for the next batch
(``allocator.py``).
Rows are committed one batch at a time, so a killed run loses at most the batches in
flight, and a re-run skips every trial that model has already answered: a zoo run
(several model specs) that stops resumes with the model and trial where it stopped.
``evaluate_experiment`` is the one entry point, also for one model of a larger sweep;
``evaluate_experiments`` answers several experiments at once, their images in one stream of batches
(``cuebench benchmark``'s benchmarks: small sets fill whole batches together).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from cuebench.expdir import ExperimentDir
from cuebench.responses import TABLE as RESPONSES_TABLE
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment, Trial

from .adaptive import adaptive_conditions, run_adaptive_blocks
from .allocator import keep_freed_memory
from .batch_loader import batches_on_device, handled_behind
from .decisions import DecisionTable, LabelMapping
from .models import ModelError, resolve_device
from .observers import Observer, PendingOutputs, check_spec, load_observer
from .preprocess import DEFAULT_POLICY, DevicePreprocess, PreprocessError, check_policy
from .stimulus_cache import DecodedStimuli, decoded_stimuli

SESSION = "1"


@dataclass
class ModelRun:
    """What one model did in one call: trials answered now and skipped, and where the time went."""

    observer: str
    weights_source: str
    answered_now: int
    skipped: int
    images: int = 0  # unique stimuli through the model
    seconds_loading: float = 0.0  # building the model with its weights
    seconds_decoding: float = 0.0  # reading (or first building) the decoded-stimulus cache
    seconds_answering: float = 0.0  # preprocessing, forward passes, decisions and stored rows


@dataclass
class EvalSummary:
    """Accuracy per model, condition and level over scored trials, plus the other roles' counts."""

    experiment: str
    runs: list[ModelRun]
    accuracy: list[dict] = field(default_factory=list)  # model, condition, level, n, correct, accuracy
    other_roles: list[dict] = field(default_factory=list)  # model, role, n, correct


def evaluate_experiment(expdir, model_specs: list[str], rule: str | None = None, batch_size: int = 64,
                        device: str = "auto", policy: str = DEFAULT_POLICY, progress: bool = True,
                        mapping_file: str | Path | None = None, workers: int | None = None,
                        database: str | None = None, loaded: dict[str, Observer] | None = None) -> EvalSummary:
    """Let each model answer every trial of ``expdir`` it has not answered yet; return the accuracy summary.

    ``rule`` replaces the default rule of its trial type (classification: ``16class-mean``;
    oddity trials always use the oddity rule). ``mapping_file`` gives label -> ImageNet
    indices for label sets that carry none (observers with their own ``classes`` need none).
    ``workers`` processes decode stimuli the first time (default: ``stimulus_cache.decoding_workers``, up to
    4 on a GPU machine, and on a CPU for 256 images or more). Models run one after the other; each one's answers are
    committed as its batches finish.
    ``database``: a ``postgresql://`` URL to write to instead of the experiment's responses.sqlite.
    ``loaded``: spec -> observer already loaded on ``device``, kept between calls: a spec found there is
    not loaded again, one loaded here is added.
    """
    return evaluate_experiments([(expdir, rule)], model_specs, batch_size, device, policy, progress, mapping_file,
                                workers, database, loaded)[0]


def evaluate_experiments(experiments: list[tuple[str | Path | ExperimentDir, str | None]], model_specs: list[str],
                         batch_size: int = 64, device: str = "auto", policy: str = DEFAULT_POLICY,
                         progress: bool = True, mapping_file: str | Path | None = None, workers: int | None = None,
                         database: str | None = None, loaded: dict[str, Observer] | None = None) -> list[EvalSummary]:
    """``evaluate_experiment`` for several experiments, each (folder, rule), at once; one summary each.

    Each model is loaded once and answers them all in one stream of batches, so the images of small
    experiments fill whole batches together instead of each ending in a partial one (``cuebench benchmark``
    answers its benchmarks so). An observer whose outputs depend on the experiment
    (``Observer.experiment_independent`` false) answers them one stream after the other.
    """
    if not model_specs:
        raise ModelError("no model to evaluate: give at least one model spec NAME[:WEIGHTS]")
    for spec in model_specs:  # a typo in the last model must not surface after the first has run
        check_spec(spec)
    check_policy(policy)
    if batch_size < 1:
        raise ModelError(f"--batch-size must be at least 1, got {batch_size}")
    opened = [_open(expdir, rule, policy) for expdir, rule in experiments]
    device = resolve_device(device)
    if device == "cpu":
        keep_freed_memory()
    runs: list[list[ModelRun]] = [[] for _ in opened]
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(ResponseStore(database or folder.responses_file)) for folder, _, _ in opened]
        for spec in dict.fromkeys(model_specs):
            start = time.perf_counter()
            observer = loaded[spec] if loaded is not None and spec in loaded else load_observer(spec, device)
            if loaded is not None:
                loaded[spec] = observer
            seconds_loading = time.perf_counter() - start
            for k, run in enumerate(_answer_all(observer, opened, stores, batch_size, policy, progress, mapping_file,
                                                workers)):
                runs[k].append(run)
            runs[0][-1].seconds_loading = seconds_loading
            del observer
        return [summarise(experiment, store, [r.observer for r in model_runs], model_runs)
                for (_, experiment, _), store, model_runs in zip(opened, stores, runs)]


def _answer_all(observer: Observer, opened: list[tuple[ExperimentDir, Experiment, DecisionTable]],
                stores: list[ResponseStore], batch_size: int, policy: str, progress: bool, mapping_file,
                workers: int | None) -> list[ModelRun]:
    """One model answers every experiment of ``opened``: in one stream where its outputs do not depend on the
    experiment, else one stream each; then their adaptive blocks. What it did in each."""
    together = observer.experiment_independent
    runs = []
    for stream in [range(len(opened))] if together else [[k] for k in range(len(opened))]:
        plans = {k: _Plan(*opened[k], stores[k], observer, mapping_file, policy, workers, progress) for k in stream}
        _answer_stream(observer, list(plans.values()), batch_size, policy, progress)
        for k, plan in plans.items():
            folder, experiment, _ = opened[k]
            answer = partial(_answers, experiment, observer, plan.decisions, plan.device_info)
            plan.run.answered_now += run_adaptive_blocks(folder, experiment, stores[k], observer, plan.decisions,
                                                         policy, progress, workers, answer)
            runs.append(plan.run)
    return runs


def _open(expdir, rule: str | None, policy: str) -> tuple[ExperimentDir, Experiment, DecisionTable]:
    """The experiment folder, its definition and its decision table, checked against ``policy``."""
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    experiment = expdir.load()
    table = DecisionTable.choose(rule, {t.trial_type for t in experiment.trials})
    segments = any(t.trial_type == "segment" for t in experiment.trials)
    if segments and policy != "as-is":
        raise PreprocessError("segment trials are scored pixel by pixel against their label masks, so a model sees "
                              "their images as they are: use --policy as-is")
    if policy == "as-is" and not segments:  # a segmenter takes each batch's own size
        _check_one_size(experiment)
    return expdir, experiment, table


def _check_one_size(experiment: Experiment) -> None:
    sizes = Counter((s.width, s.height) for s in experiment.stimuli.values() if s.width and s.height)
    if len(sizes) > 1:
        listed = ", ".join(f"{w}x{h} ({n})" for (w, h), n in sizes.most_common(4))
        raise PreprocessError(f"policy 'as-is' feeds stimuli unchanged, but this experiment's stimuli have "
                              f"several sizes: {listed}; use --policy resize-crop")


class _Plan:
    """One experiment's part in a model's stream of batches: the fixed-sequence trials the model has not
    answered, their stimuli decoded, and each trial decided and stored as soon as all its stimuli have been
    through the model."""

    def __init__(self, expdir: ExperimentDir, experiment: Experiment, table: DecisionTable, store: ResponseStore,
                 observer: Observer, mapping_file, policy: str, workers: int | None, progress: bool):
        observer.prepare(experiment)
        self.decisions = table.prepared(observer, experiment, mapping_file)
        _check_same_settings(store, experiment.name, observer.observer_id, self.decisions, policy)
        self.experiment, self.store, self.observer = experiment, store, observer
        self.device_info = _device_info(observer, self.decisions, policy)
        answered = store.answered_trial_ids(experiment.name, observer.observer_id)
        adaptive = adaptive_conditions(experiment)
        fixed = [(i, t) for i, t in enumerate(experiment.trials) if not (t.role == "test" and t.condition in adaptive)]
        self.todo = [(i, t) for i, t in fixed if t.trial_id not in answered]
        self.run = ModelRun(observer.observer_id, str(observer.provenance.get("weights", "")), 0,
                            len(fixed) - len(self.todo))
        self.first_use = list(dict.fromkeys(sid for _, t in self.todo for sid in t.stimuli))
        self.kinds = self.decisions.needs(t for _, t in self.todo) if self.todo else frozenset()
        self.decoded = None
        if self.todo:
            start = time.perf_counter()
            paths = expdir.stimulus_paths({sid: experiment.stimuli[sid] for sid in self.first_use})
            self.decoded = decoded_stimuli(expdir, paths, workers, progress, observer.device)
            self.run.seconds_decoding = time.perf_counter() - start

    def schedule(self, order: list[str]) -> None:
        """The order in which this experiment's stimuli go through the model: each trial waits for its last."""
        self.position = {sid: k for k, sid in enumerate(order)}
        self.uses = Counter(sid for _, t in self.todo for sid in t.stimuli)
        self.seen: dict[str, dict[str, np.ndarray]] = {kind: {} for kind in self.kinds}  # kind -> stimulus -> output
        self.pending = sorted(self.todo, key=lambda it: max(self.position[s] for s in it[1].stimuli))
        self.run.images = len(order)

    def finish(self, ids: list[str], outputs: dict[str, dict[str, np.ndarray]]) -> int:
        """Decide and store every trial whose stimuli have all been through the model now that ``ids`` have
        (``outputs``: kind -> stimulus id -> output); how many."""
        for kind in self.kinds:
            self.seen[kind].update(outputs[kind])
        done = self.position[ids[-1]]
        cut = next((k for k, (_, t) in enumerate(self.pending) if max(self.position[s] for s in t.stimuli) > done),
                   len(self.pending))
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        if not ready:
            return 0
        self.store.write_many(_answers(self.experiment, self.observer, self.decisions, self.device_info, ready,
                                       self.seen))
        for _, t in ready:
            for sid in t.stimuli:
                self.uses[sid] -= 1
                if not self.uses[sid]:
                    for rows in self.seen.values():
                        rows.pop(sid, None)
        self.run.answered_now += len(ready)
        return len(ready)


def _answer_stream(observer: Observer, plans: list[_Plan], batch_size: int, policy: str, progress: bool) -> None:
    """The stimuli of every plan through the model in one stream of batches (stimulus ``sid`` of
    ``plans[k]`` as ``(k, sid)``); each batch's answers decided and stored behind the model."""
    import torch
    from tqdm import tqdm

    plans = [plan for plan in plans if plan.todo]
    if not plans:
        return
    start = time.perf_counter()
    decoded = DecodedStimuli.joined([plan.decoded for plan in plans])
    batches = _batches(decoded, [(k, sid) for k, plan in enumerate(plans) for sid in plan.first_use], batch_size)
    for k, plan in enumerate(plans):
        plan.schedule([sid for ids in batches for part, sid in ids if part == k])
    kinds = frozenset().union(*(plan.kinds for plan in plans))
    preprocess = DevicePreprocess(observer.data_config, policy, observer.device, channels_last=observer.channels_last)
    bar = tqdm(total=sum(len(plan.todo) for plan in plans), desc=observer.observer_id, unit="trial",
               disable=not progress)

    def finish(outputs: PendingOutputs) -> None:
        collected = outputs.collect()
        for k, plan in enumerate(plans):
            if ids := [sid for part, sid in outputs.ids if part == k]:
                rows = {kind: {sid: collected[kind][k, sid] for sid in ids} for kind in plan.kinds}
                bar.update(plan.finish(ids, rows))

    try:
        with torch.inference_mode(), handled_behind(finish) as hand_over:
            for ids, pixels in batches_on_device(decoded, batches, observer.device):
                hand_over(PendingOutputs(observer, ids, observer.outputs(preprocess(pixels), kinds)))
    except torch.OutOfMemoryError:
        raise ModelError(f"{observer.device} ran out of memory evaluating {observer.observer_id} at --batch-size "
                         f"{batch_size}; try --batch-size {max(1, batch_size // 2)} (the answers stored so far are "
                         "kept, the next run goes on from there)") from None
    finally:
        bar.close()
    seconds, images = time.perf_counter() - start, sum(plan.run.images for plan in plans)
    for plan in plans:  # a shared stream's time, split by images
        plan.run.seconds_answering = seconds * plan.run.images / images


def _device_info(observer: Observer, decisions: DecisionTable, policy: str) -> str:
    """How the answers were made, as the stored JSON text: made once per model instead of once per row."""
    import torch

    mapping: LabelMapping | None = decisions.mapping
    return json.dumps({**observer.provenance, "device": observer.device, "policy": policy, "torch": torch.__version__,
                       "mapping": mapping.source if mapping is not None else None}, sort_keys=True)


def _batches(decoded: DecodedStimuli, first_use: list, batch_size: int) -> list[list]:
    """Stimulus ids per batch, in order of first use within each image size (a batch has one size)."""
    by_size: dict[tuple[int, int], list] = {}
    for sid in first_use:
        by_size.setdefault(decoded.shape(sid), []).append(sid)
    return [ids[i:i + batch_size] for ids in by_size.values() for i in range(0, len(ids), batch_size)]


def _check_same_settings(store: ResponseStore, experiment: str, observer: str, decisions: DecisionTable,
                         policy: str) -> None:
    """Resuming with another rule or policy would mix two kinds of answers under one observer."""
    distinct = store.conn.execute(
        f'SELECT DISTINCT "decision_rule", "device" FROM "{RESPONSES_TABLE}" WHERE "experiment" = ? '
        "AND \"observer\" = ? AND \"observer_kind\" = 'model'", [experiment, observer]).fetchall()
    stored = {(rule, json.loads(device).get("policy") if device else None) for rule, device in distinct}
    for stored_rule, stored_policy in sorted(stored, key=lambda s: (decisions.asked_instead_of(s[0]) == s[0],
                                                                    str(s))):
        now = decisions.asked_instead_of(stored_rule)
        if now is None:
            raise ModelError(f"{observer} has already answered trials of {experiment} with rule {stored_rule}, which "
                             "is not a registered decision rule here; stored answers are never overwritten, so use a "
                             "copy of the experiment")
        if now != stored_rule or stored_policy != policy:
            raise ModelError(
                f"{observer} has already answered trials of {experiment} with rule {stored_rule} and policy "
                f"{stored_policy}; stored answers are never overwritten, so evaluate with --rule {stored_rule} "
                f"--policy {stored_policy} to finish them, or use a copy of the experiment for rule {now} / "
                f"policy {policy}")


def _answers(experiment: Experiment, observer: Observer, decisions: DecisionTable, device_info: str,
             ready: list[tuple[int, Trial]], outputs: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """Response rows for ``ready`` (index, trial) pairs of ``experiment``, as the observer answers them by the
    experiment's own ``decisions`` (experiments sharing a stream each keep theirs)."""
    answers = observer.answer([t for _, t in ready], outputs, decisions)
    return [trial_row(experiment, trial, observer=observer.observer_id, observer_kind="model", session=SESSION,
                      trial_index=index, response=decision.response, decision_rule=decisions.rule_for(trial).name,
                      model_outputs={k: _compact(v) for k, v in decision.outputs.items()}, device=device_info)
            for (index, trial), decision in zip(ready, answers)]


def _compact(value):
    """Six significant digits: enough for any analysis, and keeps the JSON column small."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def summarise(experiment: Experiment, store: ResponseStore, observers: list[str],
              runs: list[ModelRun] | None = None) -> EvalSummary:
    """Accuracy per model x condition x level from the stored rows (earlier runs included), counted by the
    database: decoding every stored row would cost more than a GPU takes to answer them."""
    summary = EvalSummary(experiment.name, runs or [])
    for observer in observers:
        counts = store.conn.execute(
            f'SELECT "role", "condition", "level", COUNT(*), SUM("correct") FROM "{RESPONSES_TABLE}" '
            "WHERE \"experiment\" = ? AND \"observer\" = ? AND \"observer_kind\" = 'model' "
            'AND "correct" IS NOT NULL GROUP BY "role", "condition", "level"',
            [experiment.name, observer]).fetchall()
        cells = {(condition, level): (n, int(correct))
                 for role, condition, level, n, correct in counts if role == "test"}
        roles: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for role, _, _, n, correct in counts:
            if role != "test":
                roles[role][0] += n
                roles[role][1] += int(correct)
        for (condition, level), (n, correct) in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            summary.accuracy.append({"model": observer, "condition": condition, "level": level, "n": n,
                                     "correct": correct, "accuracy": correct / n})
        for role, (n, correct) in sorted(roles.items()):
            summary.other_roles.append({"model": observer, "role": role, "n": n, "correct": correct})
    return summary


def format_summary(summary: EvalSummary) -> str:
    """A plain-text table: one line per condition (and level), one accuracy column per model."""
    models = list(dict.fromkeys(r["model"] for r in summary.accuracy))
    if not models and any(run.answered_now or run.skipped for run in summary.runs):  # segment trials: mIoU
        return "\n".join([f"{summary.experiment}: no trial with one correct answer; segment trials are scored by "
                           "mIoU in `cuebench report`"] + [f"{run.observer}: answered {run.answered_now} trials now, "
                                                          f"{run.skipped} already stored" for run in summary.runs])
    if not models:
        return f"{summary.experiment}: no scored (test) trials answered"
    cells = {(r["condition"], r["level"], r["model"]): r for r in summary.accuracy}
    keys = list(dict.fromkeys((r["condition"], r["level"]) for r in summary.accuracy))
    labels = [c if level is None else f"{c} [level {level}]" for c, level in keys]
    first = max(len("condition"), *(len(x) for x in labels))
    widths = [max(len(m), 12) for m in models]
    lines = [f"accuracy on scored trials of {summary.experiment}",
             "  ".join(["condition".ljust(first)] + [m.rjust(w) for m, w in zip(models, widths)])]
    for label, key in zip(labels, keys):
        row = [label.ljust(first)]
        for m, w in zip(models, widths):
            r = cells.get((*key, m))
            row.append((f"{r['accuracy']:.3f} ({r['n']})" if r else "-").rjust(w))
        lines.append("  ".join(row))
    for r in summary.other_roles:
        lines.append(f"{r['model']}: {r['role']} trials {r['correct']}/{r['n']} correct (not in accuracy)")
    for run in summary.runs:
        line = f"{run.observer}: answered {run.answered_now} trials now, {run.skipped} already stored"
        if run.images:
            line += (f" ({run.images} images in {run.seconds_answering:.1f} s = "
                     f"{run.images / max(run.seconds_answering, 1e-9):.1f} images/s; model loaded in "
                     f"{run.seconds_loading:.1f} s, stimuli decoded or read from the cache in {run.seconds_decoding:.1f} s)")
        lines.append(line)
    return "\n".join(lines)
