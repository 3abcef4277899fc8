"""EED (stimuli.eed): the reference's constants and rules, agreement with the per-image
reference structure, and what the shape cue does to real photos."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stimuli.eed import (EEDError, EEDParams, diffuse, eed, gaussian_kernel_1d, snapshot_steps, symmetric_index,
                         to_display)
from stimuli.eed_reference import diffuse_one
from stimuli.quality import quality_metrics

from conftest import unavailable

PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")
REPO = Path(__file__).resolve().parents[2]


def small(photo: np.ndarray, size: int) -> np.ndarray:
    return np.asarray(Image.fromarray(photo).resize((size, size), Image.BICUBIC))


@pytest.fixture(scope="module")
def diffused(photos):
    """Four real photos at 224x224 and their raw EED after 64 and 128 steps."""
    images = np.stack([photos[name] for name in PHOTOS])
    return images, diffuse(images, [64, 128], progress=False)


def test_snapshots_are_the_reference_sqrt2_ladder():
    # 512 * sqrt(2)^k truncated: 724.08 -> 724, 1448.15 -> 1448, 5792.62 -> 5792, 11585.24 -> 11585
    assert snapshot_steps() == [512, 724, 1024, 1448, 2048, 2896, 4096, 5792, 8192, 11585, 16384]
    assert snapshot_steps(5792) == [512, 724, 1024, 1448, 2048, 2896, 4096, 5792]


def test_gaussian_kernel_is_size_5_sigma_sqrt5():
    k = gaussian_kernel_1d(5, math.sqrt(5))
    # exp(-x^2 / 10) at x = 0, 1, 2: 1, 0.904837, 0.670320; sum 4.150315
    assert np.allclose(k, np.array([0.670320, 0.904837, 1.0, 0.904837, 0.670320]) / 4.150315, atol=1e-6)


def test_symmetric_padding_repeats_the_edge_pixel():
    assert symmetric_index(4, 3).tolist() == [2, 1, 0, 0, 1, 2, 3, 3, 2, 1]
    assert np.array_equal(np.arange(5)[symmetric_index(5, 2)], np.pad(np.arange(5), 2, mode="symmetric"))


def test_saved_form_clips_then_stretches_each_image():
    raw = np.array([[[[-10.0, 50.0, 100.0], [200.0, 300.0, 150.0]]]])  # one 1x2 image
    # clip -> 0, 50, 100, 200, 255, 150; min 0, max 255 -> unchanged
    assert to_display(raw).tolist() == [[[[0, 50, 100], [200, 255, 150]]]]
    raw = np.array([[[[100.0, 110.0, 120.0], [130.0, 140.0, 150.0]]]])
    # (x - 100) / 50 * 255: 0, 51, 102, 153, 204, 255
    assert to_display(raw).tolist() == [[[[0, 51, 102], [153, 204, 255]]]]
    flat = np.full((1, 2, 2, 3), 77.0)
    assert (to_display(flat) == 77).all()


def test_flat_image_stays_flat():
    flat = np.full((1, 12, 12, 3), 90, np.uint8)
    assert np.array_equal(diffuse(flat, 5, progress=False)[5], flat.astype(np.float32))


@pytest.mark.parametrize("limit", [True, False])
def test_batched_agrees_with_reference_structure_short(photos, limit):
    images = np.stack([small(photos["chelsea"], 40), small(photos["motorcycle"], 40)])
    params = EEDParams(limit=limit)
    batched = diffuse(images, 32, params=params, progress=False)[32]
    reference = np.stack([diffuse_one(image, 32, params) for image in images])
    assert np.abs(batched - reference).max() < 1e-3
    assert np.abs(batched - images).max() > 3  # it did diffuse


@pytest.mark.parametrize("limit", [True, False])
def test_one_step_spreads_a_faint_spot_with_the_www_weights(limit):
    """A spot of 1e-3 on black: gradients are so small that the tensor is the identity
    (discriminant < 1e-6), where delta = 2 alpha = 0.98, so by the WWW weights (a - delta,
    c - delta, delta +- b over 2h^2, summed over the corners a neighbour shares) each axis
    neighbour gets tau * 2 * 0.01 = 0.004 and each diagonal one tau * 0.49 = 0.098 of the
    spot, which keeps 1 - 4 * 0.004 - 4 * 0.098 = 0.592. The stencil is non-negative
    here, so the limiter leaves the step alone."""
    image = np.zeros((1, 7, 7, 3))
    image[0, 3, 3] = 1e-3
    out = diffuse(image, 1, params=EEDParams(limit=limit), progress=False)[1][0, 2:5, 2:5, 0]
    expected = 1e-3 * np.array([[0.098, 0.004, 0.098], [0.004, 0.592, 0.004], [0.098, 0.004, 0.098]])
    assert np.allclose(out, expected, rtol=1e-4, atol=1e-9)


@pytest.mark.slow
def test_batched_agrees_with_reference_structure_after_512_steps(photos):
    """The issue's criterion (1e-3 on 0-255 after 512 steps), at 48x48 to fit CI; the
    benchmark measures it at 224x224."""
    images = np.stack([small(photos["chelsea"], 48), small(photos["astronaut"], 48)])
    batched = diffuse(images, 512, progress=False)[512]
    reference = np.stack([diffuse_one(image, 512) for image in images])
    assert np.abs(batched - reference).max() < 1e-3


@pytest.mark.slow
def test_each_channel_mean_is_kept(diffused):
    images, out = diffused
    before = images.reshape(len(images), -1, 3).mean(axis=1)
    for steps in (64, 128):
        after = out[steps].reshape(len(images), -1, 3).mean(axis=1)
        # exact inside the image; the reference's blurred tensor at the border leaks < 0.05 grey levels
        assert np.abs(after - before).max() < 0.05


@pytest.mark.slow
def test_values_never_leave_the_input_range(diffused):
    """With the flux limiter every channel stays inside its own input range (up to float32
    rounding) before clipping and rescaling."""
    images, out = diffused
    lo = images.min(axis=(1, 2)).astype(np.float32)  # (N, 3)
    hi = images.max(axis=(1, 2)).astype(np.float32)
    for steps in (64, 128):
        raw = out[steps]
        assert (raw.min(axis=(1, 2)) >= lo - 1e-3).all() and (raw.max(axis=(1, 2)) <= hi + 1e-3).all()
    shown = to_display(out[128])
    assert shown.min() == 0 and shown.max() == 255


@pytest.mark.slow
def test_plain_www_step_overshoots_which_is_why_steps_are_limited(diffused):
    """Without the limiter the WWW stencil's negative weights at strongly anisotropic
    tensors push values past the input range (docs/cue_decomposition.md)."""
    images, _ = diffused
    raw = diffuse(images, 64, params=EEDParams(limit=False), progress=False)[64]
    lo = images.min(axis=(1, 2)).astype(np.float32)
    hi = images.max(axis=(1, 2)).astype(np.float32)
    worst = max(float((lo - raw.min(axis=(1, 2))).max()), float((raw.max(axis=(1, 2)) - hi).max()))
    assert worst > 1.0


@pytest.mark.slow
def test_shape_cue_removes_texture_and_keeps_shape(photos):
    """Diffusion length grows with sqrt(steps), so 4,096 steps at 112x112 stand in for the
    full 16,384 at 224x224 in CI (the full-size numbers are in docs/cue_decomposition.md)."""
    images = np.stack([small(photos[name], 112) for name in PHOTOS])
    out = diffuse(images, [1024, 4096], progress=False)

    def mean_metrics(steps):
        ms = [quality_metrics(a, b) for a, b in zip(images, to_display(out[steps]))]
        return {k: np.mean([m[k] for m in ms]) for k in ms[0]}

    early, late = mean_metrics(1024), mean_metrics(4096)
    assert late["LV"] < early["LV"] < 1 and late["HFE"] < early["HFE"] < 1  # more steps, less texture
    assert late["HFE"] < 0.8, late
    assert late["GC"] > 0.85, late  # the outlines stay
    assert late["Texture"] < late["Shape"], late


@pytest.mark.slow
def test_shape_cue_of_a_textured_disk_is_the_disk():
    """A grey disk under strong pixel noise: EED wipes the noise (the texture) and keeps a
    sharp outline in place, so its gradients match the clean disk's far better than the
    noisy input's do."""
    yy, xx = np.mgrid[:112, :112]
    clean = np.where((yy - 56) ** 2 + (xx - 56) ** 2 < 30 ** 2, 200.0, 50.0)
    noisy = np.clip(clean + np.random.default_rng(0).normal(0, 15, clean.shape), 0, 255)

    def rgb(gray):
        return np.repeat(gray[..., None], 3, axis=-1).astype(np.uint8)

    raw = diffuse(rgb(noisy), 1024, progress=False)[1024][0]
    assert raw[40:72, 40:72].std() < 1.5  # inside the disk: noise std 15 -> flat
    profile = raw[56, 20:32, 0]  # across the left rim at x = 26
    assert profile[:5].max() < 60 and profile[-5:].min() > 190  # the rim is still a step
    assert quality_metrics(rgb(clean), to_display(raw[None])[0])["GC"] > 0.9
    assert quality_metrics(rgb(clean), rgb(noisy))["GC"] < 0.7


def test_eed_returns_uint8_snapshots_in_batches(photos):
    images = np.stack([small(photos[name], 24) for name in PHOTOS[:3]])
    out = eed(images, [2, 4], batch_size=2, progress=False)
    assert sorted(out) == [2, 4]
    assert out[4].dtype == np.uint8 and out[4].shape == images.shape
    whole = eed(images, 4, batch_size=8, progress=False)[4]
    assert np.array_equal(out[4], whole)


def test_bad_input_is_named():
    with pytest.raises(EEDError, match=r"\(N, H, W, 3\)"):
        diffuse(np.zeros((8, 8)), 1, progress=False)
    with pytest.raises(EEDError, match="step counts"):
        diffuse(np.zeros((8, 8, 3)), -1, progress=False)
    with pytest.raises(EEDError, match="batch_size"):
        eed(np.zeros((8, 8, 3)), 1, batch_size=0, progress=False)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(EEDError, match="CUDA is not available"):
            diffuse(np.zeros((8, 8, 3)), 1, device="cuda", progress=False)
    with pytest.raises(EEDError, match="not a torch device"):
        diffuse(np.zeros((8, 8, 3)), 1, device="gpu0", progress=False)


def test_params_are_the_papers():
    p = EEDParams()
    assert (p.contrast, p.kernel_size, p.sigma, p.alpha, p.tau, p.h) == (1 / 15, 5, math.sqrt(5), 0.49, 0.2, 1.0)
    assert p.limit


def test_stencil_weights_for_a_known_tensor():
    """WWW delta stencil by hand for a = 0.8, b = 0.3, c = 0.5 at every corner:
    delta = 0.49 * 1.3 + (1 - 0.98) * 0.3 = 0.643; tau / 2h^2 = 0.1; a neighbour along a row
    or column shares two corners, a diagonal one shares one."""
    from stimuli.eed_reference import NEIGHBOURS, _weights

    A, B, C = (np.full((4, 4), v) for v in (0.8, 0.3, 0.5))
    got = dict(zip(NEIGHBOURS, (float(w[1, 1]) for w in _weights(A, B, C, EEDParams()))))
    expected = {(0, -1): 0.0314, (0, 1): 0.0314, (-1, 0): -0.0286, (1, 0): -0.0286,  # 2 * 0.1 * (0.8|0.5 - 0.643)
                (-1, -1): 0.0943, (1, 1): 0.0943, (-1, 1): 0.0343, (1, -1): 0.0343}  # 0.1 * (0.643 +- 0.3)
    assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("limit", [True, False])
def test_torch_path_agrees_with_reference_structure(photos, limit):
    """The whole-batch torch path (devices without a compiled kernel), run here on the CPU."""
    import torch

    from stimuli.eed_torch import Stepper

    images = np.stack([small(photos["chelsea"], 40), small(photos["motorcycle"], 40)])
    params = EEDParams(limit=limit)
    u = torch.as_tensor(images.transpose(0, 3, 1, 2).copy(), dtype=torch.float32)
    bounds = (u.amin(dim=(2, 3), keepdim=True), u.amax(dim=(2, 3), keepdim=True)) if limit else None
    with torch.inference_mode():
        out = Stepper(40, 40, params, "cpu")(u, 32, bounds).permute(0, 2, 3, 1).numpy()
    reference = np.stack([diffuse_one(image, 32, params) for image in images])
    assert np.abs(out - reference).max() < 1e-3


TRITON_INTERPRETED = """
import json, sys
import numpy as np, torch
from stimuli.eed import EEDParams
from stimuli.eed_triton import Stepper, Variant
images = np.load(sys.argv[1])
u0 = torch.as_tensor(images.transpose(0, 3, 1, 2).copy(), dtype=torch.float32)
out = {}
for name, variant, limits in json.loads(sys.argv[3]):
    for limit in limits:
        bounds = (u0.amin(dim=(2, 3), keepdim=True), u0.amax(dim=(2, 3), keepdim=True)) if limit else None
        stepper = Stepper(images.shape[1], images.shape[2], EEDParams(limit=limit), "cpu", Variant(**variant))
        out[f"{name} {limit}"] = stepper(u0.clone(), int(sys.argv[2]), bounds).permute(0, 2, 3, 1).tolist()
print(json.dumps(out))
"""


def test_triton_kernels_agree_with_reference_in_interpreter_mode(photos, tmp_path):
    """The CUDA kernels, run by Triton's interpreter on the CPU (numpy), make a step of two small photos as
    the reference does, limiter on and off (it acts on these images, at their border rows and columns too), in
    each layout: 2-D tiles; strips walked down row by row, here 2 strips x 2 blocks of rows so the halos
    between them and a part-filled strip are crossed; and those strips with the limiter's rooms made inside
    the update."""
    try:
        import triton  # noqa: F401
    except ImportError:
        unavailable("triton is not installed (the dev extra)")
    image = small(photos["chelsea"], 10).astype(np.float32)
    images = np.stack([image, image.transpose(1, 0, 2)])
    np.save(tmp_path / "images.npy", images)
    layouts = [("tiles", dict(layout="tiles", rows=16, cols=64), [True, False]),
               ("rows", dict(layout="rows", rows=6, cols=8, num_warps=1), [True, False]),
               ("rows-fused", dict(layout="rows", rows=6, cols=8, num_warps=1, fused=True), [True])]
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", TRITON_INTERPRETED, str(tmp_path / "images.npy"), "1",
                           json.dumps(layouts)], env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    references = {limit: np.stack([diffuse_one(im, 1, EEDParams(limit=limit)) for im in images])
                  for limit in (True, False)}
    limited = np.abs(references[True] - references[False]).max(axis=-1) > 1e-3
    assert limited[:, [0, -1], :].any() and limited[:, :, [0, -1]].any()
    assert len(got) == 5
    for key, out in got.items():
        limit = key.endswith("True")
        assert np.abs(np.array(out) - references[limit]).max() < 1e-4, key


def test_an_unknown_kernel_layout_is_named():
    from stimuli.eed_triton import Stepper

    with pytest.raises(EEDError, match=r"unknown EED kernel layout 'row'; known: tiles, .*rows"):
        Stepper(8, 8, EEDParams(), "cpu", "row")


def test_default_kernels_compile_for_an_h100_without_spilling():
    """The default layout's kernels, compiled for sm_90 as a step launches them (no GPU needed), keep every
    value in registers: a spill is off-chip traffic on every use (the 2-D tiles spill hundreds of values)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        unavailable("triton is not installed (the dev extra)")
    spec = importlib.util.spec_from_file_location("eed_kernel_resources",
                                                  REPO / "benchmarks" / "eed_kernel_resources.py")
    resources = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resources)
    from stimuli.eed_triton import DEFAULT_VARIANT

    rows = resources.layout_resources(DEFAULT_VARIANT, arch=90)
    assert {row["constants"].get("LIMIT") for row in rows} >= {True, False}  # steps with and without the limiter
    for row in rows:
        assert row["spills"] == 0 and row["registers"] <= 128, row
        assert row["global_loads"] > 0


def test_out_of_memory_names_a_batch_size_to_try(monkeypatch):
    """What a GPU's out-of-memory error turns into (raised here by hand: no GPU needed)."""
    import torch

    import stimuli.eed

    def exhausted(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(stimuli.eed, "diffuse", exhausted)
    with pytest.raises(EEDError, match=r"out of GPU memory with 6 images of 8x8 .* \(--eed-batch\) of 3"):
        eed(np.zeros((6, 8, 8, 3)), 1, batch_size=6, progress=False)


@pytest.mark.gpu
@pytest.mark.parametrize("limit", [True, False])
def test_cuda_agrees_with_cpu_reference_after_512_steps(photos, limit):
    """The Triton kernels on a GPU against the per-image CPU reference (the issue's 1e-3
    after 512 steps), with snapshots on the way."""
    images = np.stack([small(photos["chelsea"], 64), small(photos["astronaut"], 64)])
    params = EEDParams(limit=limit)
    out = diffuse(images, [256, 512], params=params, device="cuda", progress=False)
    reference = np.stack([diffuse_one(image, 512, params) for image in images])
    assert np.abs(out[512] - reference).max() < 1e-3
    assert np.abs(out[256] - out[512]).max() > 0.1


@pytest.mark.gpu
def test_gpu_batch_fits_free_memory():
    import torch

    from stimuli.eed import default_batch_size
    from stimuli.eed_triton import BYTES_PER_PIXEL

    free, _ = torch.cuda.mem_get_info()
    size = default_batch_size("cuda", 224, 224)
    assert 1 <= size and size * BYTES_PER_PIXEL * 224 * 224 <= free
