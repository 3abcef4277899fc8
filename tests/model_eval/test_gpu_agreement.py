"""On a CUDA GPU the speed paths give the CPU's answers: ``cuebench eval`` on the 400 DiST triplets
and Gram texture synthesis. Skipped where torch sees no GPU; on a GPU machine run
``pytest -m gpu -rP`` (``-rP`` prints the agreement numbers)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

LITE0 = "tf_efficientnet_lite0"
NEAR_TIE = 0.01
"""Largest-minus-second mean cosine distance below which an oddity decision counts as a near tie."""


def answers(root) -> dict[str, dict]:
    with ResponseStore(ExperimentDir(root).responses_file) as store:
        return {r["trial_id"]: r for r in store.rows()}


def margin(row: dict) -> float:
    top, second = sorted(row["model_outputs"].values(), reverse=True)[:2]
    return top - second


@pytest.mark.shared
def test_dist_decisions_on_cuda_agree_with_cpu(shared, tmp_path):
    cpu, cuda = tmp_path / "dist-cpu", tmp_path / "dist-cuda"
    assert main(["stimuli", "build", "--design", "dist-import", "--images", str(shared / "data/dist"),
                 "--out", str(cpu)]) == 0
    shutil.copytree(cpu, cuda)
    for root, device, batch in ((cpu, "cpu", "64"), (cuda, "cuda", "256")):
        assert main(["eval", "--model", LITE0, "--experiment", str(root), "--device", device,
                     "--batch-size", batch, "--quiet"]) == 0
    on_cpu, on_cuda = answers(cpu), answers(cuda)
    assert on_cpu.keys() == on_cuda.keys()
    triplets = [t for t, row in on_cpu.items() if row["role"] == "test"]  # the catch trials aside
    assert len(triplets) == 400
    flips = [t for t in triplets if on_cpu[t]["response"] != on_cuda[t]["response"]]
    near = [t for t in flips if margin(on_cpu[t]) < NEAR_TIE]
    accuracy = {name: np.mean([rows[t]["correct"] for t in triplets]) for name, rows in (("cpu", on_cpu),
                                                                                          ("cuda", on_cuda))}
    print(f"DiST, Lite0: cuda and cpu agree on {len(triplets) - len(flips)}/{len(triplets)} triplets; "
          f"{len(flips)} flips, {len(near)} of them near ties (CPU margin < {NEAR_TIE}): "
          f"margins {[round(margin(on_cpu[t]), 4) for t in flips]}; "
          f"accuracy cpu {accuracy['cpu']:.4f}, cuda {accuracy['cuda']:.4f}")
    assert len(flips) <= 0.02 * len(triplets)
    assert abs(accuracy["cpu"] - accuracy["cuda"]) <= 0.01
    assert {r["device"]["device"] for r in on_cuda.values()} == {"cuda"}


def test_gram_synthesis_on_cuda_matches_cpu(photos):
    """One step is the same computation on both (within a grey level's rounding). Later steps drift apart
    pixel by pixel, as any optimiser does from float32 rounding (an H100 against a CPU: 5 steps, up to 8
    grey levels in 11 % of the pixels), but reach the same Gram loss: 0.04-0.15 % apart on an H100, where
    each of these early steps lowers it by about 12 %; the bound, 1 %, is under a tenth of one step's gain.
    TF32 convolutions, torch's default on CUDA, gave 24 grey levels in 52 % of the pixels; synthesis turns
    them off (``full_float32``)."""
    from cuebench_app.feature_nets import load_feature_net
    from stimuli.texture_synthesis import synthesize

    originals = np.stack([photos["chelsea"], photos["coffee"]])
    nets = {device: load_feature_net(LITE0, device) for device in ("cpu", "cuda")}
    for steps, most in ((1, 1), (5, None)):
        on = {device: synthesize(originals, [1, 2], net, steps=steps) for device, net in nets.items()}
        diff = np.abs(on["cpu"].images.astype(int) - on["cuda"].images.astype(int))
        loss_gap = np.abs(on["cpu"].losses - on["cuda"].losses) / on["cpu"].losses
        print(f"Gram synthesis, {steps} L-BFGS step(s): max |cuda - cpu| {diff.max()} grey levels, "
              f"{(diff > 0).mean():.4%} of the pixels differ; relative loss gap {loss_gap.max():.2e}")
        if most is not None:
            assert diff.max() <= most
        assert loss_gap.max() <= 1e-2


def test_a_cuda_device_that_does_not_exist_is_named():
    import torch

    from model_eval.models import ModelError, resolve_device

    count = torch.cuda.device_count()
    assert resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(ModelError, match=f"--device cuda:{count}: torch sees {count} CUDA GPU"):
        resolve_device(f"cuda:{count}")
