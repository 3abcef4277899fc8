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
    from cuebench_app.feature_nets import load_feature_net
    from stimuli.texture_synthesis import synthesize

    originals = np.stack([photos["chelsea"], photos["coffee"]])
    on_cpu = synthesize(originals, [1, 2], load_feature_net(LITE0, "cpu"), steps=5).images.astype(int)
    on_cuda = synthesize(originals, [1, 2], load_feature_net(LITE0, "cuda"), steps=5).images.astype(int)
    diff = np.abs(on_cpu - on_cuda)
    print(f"Gram synthesis, 5 L-BFGS steps: max |cuda - cpu| {diff.max()} grey levels, "
          f"{(diff > 0).mean():.4%} of the pixels differ")
    assert diff.max() <= 1


def test_a_cuda_device_that_does_not_exist_is_named():
    import torch

    from model_eval.models import ModelError, resolve_device

    count = torch.cuda.device_count()
    assert resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(ModelError, match=f"--device cuda:{count}: torch sees {count} CUDA GPU"):
        resolve_device(f"cuda:{count}")
