"""Models answer adaptive blocks one trial at a time, through the same QUEST+ loop as people.

A fixed-sequence evaluation batches every trial; an adaptive block cannot, because each level
depends on the answers before it. So the model sees one image, its answer updates QUEST+
(``cuebench.adaptive``), and the row is committed with the posterior estimate after it, before
the next level is chosen. A re-run replays the stored answers and continues the block.
"""

from __future__ import annotations

from cuebench.adaptive import MODEL
from cuebench.counterbalance import adaptive_blocks
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, score
from cuebench.trials import Experiment

from .decisions import DecisionTable
from .observers import Observer, PendingOutputs
from .preprocess import DevicePreprocess
from .stimulus_cache import decoded_stimuli


def adaptive_conditions(experiment: Experiment) -> set[str]:
    """Conditions whose test trials are answered only through their adaptive block."""
    return {plan.condition for plan in experiment.adaptive}


def run_adaptive_blocks(expdir: ExperimentDir, experiment: Experiment, store: ResponseStore, observer: Observer,
                        decisions: DecisionTable, policy: str, progress: bool, workers: int | None, answer) -> int:
    """Let the observer finish every adaptive block of ``experiment``; returns how many trials it answered now.

    ``answer(ready, outputs)`` is model evaluation's response-row maker (``model_eval.evaluate``) by the
    experiment's ``decisions``, so an adaptive answer is decided exactly like a batched one; ``decisions`` also
    says which outputs each trial needs.
    The block's images come from the experiment's decoded-stimulus cache like every other's.
    """
    import torch
    from tqdm import tqdm

    blocks = [block for block in adaptive_blocks(experiment, store, observer.observer_id, MODEL) if not block.finished]
    if not blocks:
        return 0
    shown = {sid for plan in experiment.adaptive for ids in experiment.adaptive_trials(plan.condition).values()
             for tid in ids for sid in experiment.trial(tid).stimuli}
    decoded = decoded_stimuli(expdir, expdir.stimulus_paths({sid: experiment.stimuli[sid] for sid in sorted(shown)}),
                              workers, progress, observer.device)
    preprocess = DevicePreprocess(observer.data_config, policy, observer.device, channels_last=observer.channels_last)
    answered = 0
    for block in blocks:
        bar = tqdm(total=block.plan.trials, initial=block.index, desc=f"{observer.observer_id} {block.session}",
                   unit="trial", disable=not progress)
        while not block.finished:
            level, trial_id = block.next_trial()
            trial = experiment.trial(trial_id)
            with torch.inference_mode():
                pixels = torch.from_numpy(decoded.gather(list(trial.stimuli))).to(observer.device)
                outputs = observer.outputs(preprocess(pixels), decisions.needs([trial]))
            row = answer([(block.index, trial)], PendingOutputs(observer, list(trial.stimuli), outputs).collect())[0]
            store.write({**row, **block.record(level, trial_id, bool(score(trial, row["response"])))})
            answered += 1
            bar.update(1)
        bar.close()
    return answered
