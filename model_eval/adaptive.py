"""Models answer adaptive blocks one trial at a time, through the same QUEST+ loop as people.

A fixed-sequence evaluation batches every trial; an adaptive block cannot, because each level
depends on the answers before it. So the model sees one image, its answer updates QUEST+
(``cuebench.adaptive``), and the row is committed with the posterior estimate after it, before
the next level is chosen. A re-run replays the stored answers and continues the block.
"""

from __future__ import annotations

from cuebench.design import adaptive_blocks
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, score
from cuebench.trials import Experiment

from .models import LoadedModel
from .preprocess import Normalise, ToUint8Tensor


def adaptive_conditions(experiment: Experiment) -> set[str]:
    """Conditions whose test trials are answered only through their adaptive block."""
    return {plan.condition for plan in experiment.adaptive}


def run_adaptive_blocks(expdir: ExperimentDir, experiment: Experiment, store: ResponseStore, loaded: LoadedModel,
                        rule: str, mapping, policy: str, progress: bool, forward, answer) -> int:
    """Let the model finish every adaptive block of ``experiment``; returns how many trials it answered now.
    ``forward`` and ``answer`` are model evaluation's own forward pass and response-row maker
    (``model_eval.evaluate``), so an adaptive answer is decided exactly like a batched one."""
    import torch
    from tqdm import tqdm

    to_tensor = ToUint8Tensor(loaded.data_config, policy)
    normalise = Normalise(loaded.data_config, loaded.device)
    device_info = {"model": loaded.name, "weights": loaded.weights_source, "device": loaded.device,
                   "policy": policy, "torch": torch.__version__,
                   "mapping": mapping.source if mapping is not None else None}
    answered = 0
    for block in adaptive_blocks(experiment, store, loaded.observer_id):
        bar = tqdm(total=block.plan.trials, initial=block.index, desc=f"{loaded.observer_id} {block.session}",
                   unit="trial", disable=not progress)
        while not block.finished:
            level, trial_id = block.next_trial()
            trial = experiment.trial(trial_id)
            image = to_tensor(expdir.stimulus_path(experiment.stimuli[trial.stimuli[0]]))[None]
            with torch.inference_mode():
                probs, _ = forward(loaded.model, normalise(image.to(loaded.device)), True, False, False)
            row = answer(experiment, block.index, trial, loaded.observer_id, rule, mapping,
                         {trial.stimuli[0]: probs[0]}, {}, device_info)
            store.write({**row, **block.record(level, trial_id, bool(score(trial, row["response"])))})
            answered += 1
            bar.update(1)
        bar.close()
    return answered
