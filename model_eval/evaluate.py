"""Models answer an experiment's trials, batched, resumable, into the experiment's response store.

Every trial (test, practice, catch, attention) is answered and stored with its role, as a
person's answer would be; accuracy summaries count only the scored (``test``) trials.
Each unique stimulus goes through the model once. On a GPU, DataLoader workers decode and
resize while the model runs channels-last under bfloat16 autocast; on a CPU the main
process decodes (workers would take the model's cores) and freed activation memory is
kept for the next batch (``allocator.py``).
Rows are committed one batch at a time, so a killed run loses at most one batch, and a
re-run skips every trial that model has already answered.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment, Trial

from .adaptive import adaptive_conditions, run_adaptive_blocks
from .allocator import keep_freed_memory
from .decisions import (CLASSIFY_RULES, DEFAULT_RULE, ODDITY_RULE, DecisionError, LabelMapping, check_rule,
                        decide_classify, decide_oddity, label_mapping)
from .models import LoadedModel, ModelError, check_architecture, load_model, parse_spec, resolve_device
from .preprocess import DEFAULT_POLICY, Normalise, PreprocessError, ToUint8Tensor, check_policy

SESSION = "1"


@dataclass
class ModelRun:
    """What one model did in one call: how many trials it answered now and how many it skipped."""

    observer: str
    weights_source: str
    answered_now: int
    skipped: int


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
                        database: str | None = None) -> EvalSummary:
    """Let each model answer every trial of ``expdir`` it has not answered yet; return the accuracy summary.

    ``rule`` decides classification trials (default ``16class-mean``); oddity trials always
    use the oddity rule. ``mapping_file`` gives label -> ImageNet indices for label sets that
    carry none. ``workers`` DataLoader processes decode images (default: up to 4 on a GPU, none on a CPU).
    ``database``: a ``postgresql://`` URL to write to instead of the experiment's responses.sqlite.
    """
    if not model_specs:
        raise ModelError("no model to evaluate: give at least one model spec NAME[:WEIGHTS]")
    for spec in model_specs:  # a typo in the last model must not surface after the first has run
        check_architecture(parse_spec(spec)[0])
    expdir = expdir if isinstance(expdir, ExperimentDir) else ExperimentDir(expdir)
    experiment = expdir.load()
    rule = check_rule(rule or DEFAULT_RULE)
    check_policy(policy)
    if batch_size < 1:
        raise ModelError(f"--batch-size must be at least 1, got {batch_size}")
    kinds = {t.trial_type for t in experiment.trials}
    if rule == ODDITY_RULE and "classify" in kinds:
        raise DecisionError("rule 'oddity' cannot answer classification trials; "
                            f"choose one of {', '.join(CLASSIFY_RULES)} (oddity trials use the oddity rule anyway)")
    mapping = _mapping_for(experiment, rule, mapping_file) if "classify" in kinds else None
    if policy == "as-is":
        _check_one_size(experiment)
    device = resolve_device(device)
    if device == "cpu":
        keep_freed_memory()
    runs = []
    with ResponseStore(database or expdir.responses_file) as store:
        for spec in model_specs:
            loaded = load_model(spec, device)
            runs.append(_run_model(expdir, experiment, store, loaded, rule, mapping, batch_size, policy, progress,
                                   _default_workers(device) if workers is None else workers))
            runs[-1].answered_now += run_adaptive_blocks(expdir, experiment, store, loaded, rule, mapping, policy,
                                                         progress, _forward, _answer)
            del loaded
        return summarise(experiment, store, [r.observer for r in runs], runs)


def _mapping_for(experiment: Experiment, rule: str, mapping_file) -> LabelMapping | None:
    if rule == "imagenet-top1":
        try:
            return label_mapping(experiment.label_set, mapping_file)
        except DecisionError:
            return None  # top-1 answers are then ImageNet class names
    return label_mapping(experiment.label_set, mapping_file)


def _check_one_size(experiment: Experiment) -> None:
    sizes = Counter((s.width, s.height) for s in experiment.stimuli.values() if s.width and s.height)
    if len(sizes) > 1:
        listed = ", ".join(f"{w}x{h} ({n})" for (w, h), n in sizes.most_common(4))
        raise PreprocessError(f"policy 'as-is' feeds stimuli unchanged, but this experiment's stimuli have "
                              f"several sizes: {listed}; use --policy resize-crop")


def _default_workers(device: str) -> int:
    """Decoding processes: on a GPU they keep the device fed from otherwise idle cores; on a
    CPU they would take cores from the model's own threads (measured on 2 cores: 0.58x of
    a bare loop with one worker, 0.85x decoding in-process), so there the main process decodes."""
    if device.startswith("cuda"):
        return max(1, min(4, (os.cpu_count() or 2) - 1))
    return 0


class _StimulusFiles:
    """Dataset of stimulus files -> (position, uint8 tensor); picklable for worker processes."""

    def __init__(self, paths: list[Path], to_tensor: ToUint8Tensor):
        self.paths = paths
        self.to_tensor = to_tensor

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        return i, self.to_tensor(self.paths[i])


def _run_model(expdir: ExperimentDir, experiment: Experiment, store: ResponseStore, loaded: LoadedModel, rule: str,
               mapping: LabelMapping | None, batch_size: int, policy: str, progress: bool, workers: int) -> ModelRun:
    import torch
    from tqdm import tqdm

    _check_same_settings(store, experiment.name, loaded.observer_id, rule, policy)
    answered = store.answered_trial_ids(experiment.name, loaded.observer_id)
    adaptive = adaptive_conditions(experiment)
    fixed = [(i, t) for i, t in enumerate(experiment.trials) if not (t.role == "test" and t.condition in adaptive)]
    todo = [(i, t) for i, t in fixed if t.trial_id not in answered]
    run = ModelRun(loaded.observer_id, loaded.weights_source, 0, len(fixed) - len(todo))
    if not todo:
        return run
    order = list(dict.fromkeys(sid for _, t in todo for sid in t.stimuli))
    position = {sid: k for k, sid in enumerate(order)}
    uses = Counter(sid for _, t in todo for sid in t.stimuli)
    need_probs = any(t.trial_type == "classify" for _, t in todo)
    need_features = any(t.trial_type == "oddity" for _, t in todo)
    cuda = loaded.device.startswith("cuda")
    loader = torch.utils.data.DataLoader(
        _StimulusFiles([expdir.stimulus_path(experiment.stimuli[sid]) for sid in order],
                       ToUint8Tensor(loaded.data_config, policy)),
        batch_size=batch_size, shuffle=False, num_workers=workers, pin_memory=cuda)
    model = loaded.model.to(memory_format=torch.channels_last) if cuda else loaded.model
    normalise = Normalise(loaded.data_config, loaded.device, channels_last=cuda)
    device_info = {"model": loaded.name, "weights": loaded.weights_source, "device": loaded.device,
                   "policy": policy, "torch": torch.__version__,
                   "mapping": mapping.source if mapping is not None else None}
    probs: dict[str, np.ndarray] = {}
    features: dict[str, np.ndarray] = {}
    pending = sorted(todo, key=lambda it: max(position[s] for s in it[1].stimuli))  # by when they can be answered
    bar = tqdm(total=len(todo), desc=loaded.observer_id, unit="trial", disable=not progress)
    with torch.inference_mode():
        for positions, batch in loader:
            batch_probs, batch_features = _forward(model, normalise(batch.to(loaded.device, non_blocking=cuda)),
                                                   need_probs, need_features, cuda)
            for k, p in enumerate(positions.tolist()):
                sid = order[p]
                if batch_probs is not None:
                    probs[sid] = batch_probs[k]
                if batch_features is not None:
                    features[sid] = batch_features[k]
            done = int(positions[-1])
            cut = next((k for k, (_, t) in enumerate(pending) if max(position[s] for s in t.stimuli) > done),
                       len(pending))
            ready, pending = pending[:cut], pending[cut:]
            if not ready:
                continue
            store.write_many([_answer(experiment, i, t, loaded.observer_id, rule, mapping, probs, features, device_info)
                              for i, t in ready])
            for _, t in ready:
                for sid in t.stimuli:
                    uses[sid] -= 1
                    if not uses[sid]:
                        probs.pop(sid, None)
                        features.pop(sid, None)
            run.answered_now += len(ready)
            bar.update(len(ready))
    bar.close()
    return run


def _check_same_settings(store: ResponseStore, experiment: str, observer: str, rule: str, policy: str) -> None:
    """Resuming with another rule or policy would mix two kinds of answers under one observer."""
    stored = {(r["decision_rule"], (r["device"] or {}).get("policy"))
              for r in store.rows("experiment = ? AND observer = ? AND observer_kind = 'model'", [experiment, observer])}
    for stored_rule, stored_policy in sorted(stored, key=lambda s: (s[0] == ODDITY_RULE, str(s))):
        if (stored_rule != ODDITY_RULE and stored_rule != rule) or stored_policy != policy:
            raise ModelError(
                f"{observer} has already answered trials of {experiment} with rule {stored_rule} and policy "
                f"{stored_policy}; stored answers are never overwritten, so evaluate with --rule {stored_rule} "
                f"--policy {stored_policy} to finish them, or use a copy of the experiment for rule {rule} / "
                f"policy {policy}")


def _forward(model, x, need_probs: bool, need_features: bool, cuda: bool):
    """Softmax probabilities and/or penultimate features (``forward_head(pre_logits=True)``) as numpy."""
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
        trunk = model.forward_features(x)
        logits = model.forward_head(trunk) if need_probs else None
        pre = model.forward_head(trunk, pre_logits=True) if need_features else None
    probs = logits.float().softmax(dim=-1).cpu().numpy() if logits is not None else None
    feats = pre.float().flatten(1).cpu().numpy() if pre is not None else None
    return probs, feats


def _answer(experiment: Experiment, index: int, trial: Trial, observer: str, rule: str, mapping, probs, features,
            device_info: dict) -> dict:
    if trial.trial_type == "oddity":
        decision, used = decide_oddity(np.stack([features[s] for s in trial.stimuli])), ODDITY_RULE
    else:
        decision, used = decide_classify(probs[trial.stimuli[0]], trial.choices, mapping, rule), rule
    return trial_row(experiment, trial, observer=observer, observer_kind="model", session=SESSION,
                     trial_index=index, response=decision.response, decision_rule=used,
                     model_outputs={k: _compact(v) for k, v in decision.outputs.items()}, device=device_info)


def _compact(value):
    """Six significant digits: enough for any analysis, and keeps the JSON column small."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def summarise(experiment: Experiment, store: ResponseStore, observers: list[str],
              runs: list[ModelRun] | None = None) -> EvalSummary:
    """Accuracy per model x condition x level from the stored rows (earlier runs included)."""
    summary = EvalSummary(experiment.name, runs or [])
    for observer in observers:
        cells: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
        roles: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for row in store.rows("experiment = ? AND observer = ? AND observer_kind = 'model'",
                              [experiment.name, observer]):
            if row["correct"] is None:
                continue
            target = cells[(row["condition"], row["level"])] if row["role"] == "test" else roles[row["role"]]
            target[0] += 1
            target[1] += row["correct"]
        for (condition, level), (n, correct) in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            summary.accuracy.append({"model": observer, "condition": condition, "level": level, "n": n,
                                     "correct": correct, "accuracy": correct / n})
        for role, (n, correct) in sorted(roles.items()):
            summary.other_roles.append({"model": observer, "role": role, "n": n, "correct": correct})
    return summary


def format_summary(summary: EvalSummary) -> str:
    """A plain-text table: one line per condition (and level), one accuracy column per model."""
    models = list(dict.fromkeys(r["model"] for r in summary.accuracy))
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
        lines.append(f"{run.observer}: answered {run.answered_now} trials now, {run.skipped} already stored")
    return "\n".join(lines)
