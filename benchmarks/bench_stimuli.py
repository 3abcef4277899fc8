"""Suppression-stimulus and quality-metric throughput: our path against a per-image baseline.

Stimulus building, every level of each condition's grid. Ours: the builder
(``stimuli.build.run_jobs`` with ``stimuli.suppression.suppress``) writing a temporary
experiment folder: decode once per source, all cores, content-addressed PNGs with provenance.
Baseline: what the paper's code does, written here in its plain form: one image and one
transform at a time in a Python loop, OpenCV/NumPy, a single process, one PNG per stimulus
saved with Pillow's default PNG settings. Same images, same settings, same
run; images/s per transform and overall, and the ratio. The transforms alone (``suppress``
against the baseline's, in this process, no files) are timed too, to separate the transform
code from the file writing.

Metrics. Ours: ``stimuli.metrics_table.metrics_table`` (Table 2 rows, all cores, each
original's statistics computed once). Baseline: ``quality_metrics`` called per image and
row in one process. Images/s and the ratio.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_stimuli.py --images default
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_stimuli.py --images ../shared/data/dist/original --limit 40
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

BENCH_CONDITIONS = ("patch_shuffle", "patch_rotation", "grid_overlay", "bilateral", "gaussian_blur", "grayscale",
              "channel_shuffle")


# --- the baseline: the plain per-image loop --------------------------------------------------

def _patches(image, grid):
    side = min(image.shape[:2]) // grid
    top, left = (image.shape[0] - grid * side) // 2, (image.shape[1] - grid * side) // 2
    return [image[top + r * side: top + (r + 1) * side, left + c * side: left + (c + 1) * side].copy()
            for r in range(grid) for c in range(grid)], side, top, left


def _assemble(image, patches, grid, side, top, left):
    out = image.copy()
    rows = [np.concatenate(patches[r * grid:(r + 1) * grid], axis=1) for r in range(grid)]
    out[top:top + grid * side, left:left + grid * side] = np.concatenate(rows, axis=0)
    return out


def baseline_transform(image, condition, params, rng: random.Random):
    if condition in ("patch_shuffle", "grid_overlay"):
        patches, side, top, left = _patches(image, params["grid"])
        rng.shuffle(patches)
        shuffled = _assemble(image, patches, params["grid"], side, top, left)
        if condition == "patch_shuffle":
            return shuffled
        out = image.copy()
        for i in range(1, params["grid"]):
            for line in (top + i * side - 1, top + i * side):
                out[line, left:left + params["grid"] * side] = shuffled[line, left:left + params["grid"] * side]
            for line in (left + i * side - 1, left + i * side):
                out[top:top + params["grid"] * side, line] = shuffled[top:top + params["grid"] * side, line]
        return out
    if condition == "patch_rotation":
        patches, side, top, left = _patches(image, params["grid"])
        return _assemble(image, [np.rot90(p, rng.randrange(4)) for p in patches], params["grid"], side, top, left)
    if condition == "bilateral":
        return cv2.bilateralFilter(image, params["d"], params["sigma_color"], params["sigma_space"])
    if condition == "gaussian_blur":
        return cv2.GaussianBlur(image, (params["ksize"], params["ksize"]), params["sigma"])
    if condition == "grayscale":
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[..., None].astype(np.float64)
        return np.clip(np.rint((1 - params["alpha"]) * image + params["alpha"] * gray), 0, 255).astype(np.uint8)
    if condition == "channel_shuffle":
        order = list(range(3))
        while order == [0, 1, 2]:
            rng.shuffle(order)
        return image[..., order]
    raise ValueError(condition)


def time_baseline(sources, plan, out_dir: Path) -> float:
    from PIL import Image

    from stimuli.sources import fit_to_stimulus

    rng = random.Random(0)
    start = time.perf_counter()
    for s, source in enumerate(sources):
        image = fit_to_stimulus(source.read())
        for t, (condition, params) in enumerate(plan):
            pixels = baseline_transform(image, condition, params, rng)
            Image.fromarray(np.ascontiguousarray(pixels)).save(out_dir / f"{s}_{t}.png", compress_level=6)
    return time.perf_counter() - start


def time_transforms(images, plan) -> tuple[float, float]:
    """Seconds for the transforms alone: ours (``suppress``) and the baseline's, one process."""
    from stimuli.suppression import suppress

    start = time.perf_counter()
    for i, image in enumerate(images):
        for condition, params in plan:
            suppress(image, condition, params, i)
    ours = time.perf_counter() - start
    rng = random.Random(0)
    start = time.perf_counter()
    for image in images:
        for condition, params in plan:
            baseline_transform(image, condition, params, rng)
    return ours, time.perf_counter() - start


# --- our path: the builder --------------------------------------------------------------------

def time_builder(sources, plan, out_dir: Path, workers: int | None) -> float:
    from stimuli.build import SourceJob, Task, run_jobs
    from cuebench.expdir import ExperimentDir

    jobs = [SourceJob(source, [Task(condition, params, 1, "stimuli.suppression:suppress") for condition, params in plan])
            for source in sources]
    start = time.perf_counter()
    run_jobs(ExperimentDir(out_dir), jobs, workers=workers, progress=False)
    return time.perf_counter() - start


def time_metrics(images, workers: int | None) -> tuple[float, float]:
    from stimuli.metrics_table import TABLE2_SETTINGS, metrics_table
    from stimuli.quality import quality_metrics, to_gray
    from stimuli.suppression import suppress

    start = time.perf_counter()
    metrics_table(images, seed=0, progress=False, workers=workers)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    for i, image in enumerate(images):
        gray = np.repeat(to_gray(image).astype(np.uint8)[..., None], 3, axis=2)
        for row in TABLE2_SETTINGS:
            quality_metrics(gray, suppress(gray, row.condition, row.params, i))
    return ours, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="default", help="'default' or an image folder")
    parser.add_argument("--labels", default=None, help="labels CSV for a flat folder")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N images")
    parser.add_argument("--workers", type=int, default=None, help="builder and metrics processes (default: all cores)")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    args = parser.parse_args()

    from stimuli.build import default_workers
    from stimuli.sources import fit_to_stimulus, resolve_images
    from stimuli.suppression import CONDITIONS

    sources = resolve_images(args.images, args.labels)[:args.limit]
    workers = args.workers or default_workers()
    result = {"images": len(sources), "workers": workers, "opencv_threads": cv2.getNumThreads(),
              "load_average": os.getloadavg(),
              "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "build": {}}
    plans = {name: [(name, params) for params in CONDITIONS[name].grid] for name in BENCH_CONDITIONS}
    plans["overall"] = [step for plan in list(plans.values()) for step in plan]
    images = [fit_to_stimulus(source.read()) for source in sources]
    print(f"{len(sources)} source images, {workers} worker process(es); img/s = stimuli per second")
    print(f"{'':<16}{'':>8}{'---- transforms only ----':>34}{'---- build (PNG files) ----':>34}")
    print(f"{'transform':<16}{'stimuli':>8}" + f"{'ours img/s':>12}{'baseline':>12}{'ratio':>10}" * 2)
    for name, plan in plans.items():
        with tempfile.TemporaryDirectory() as ours_dir, tempfile.TemporaryDirectory() as base_dir:
            ours = time_builder(sources, plan, Path(ours_dir), workers)
            base = time_baseline(sources, plan, Path(base_dir))
        ours_t, base_t = time_transforms(images, plan)
        n = len(sources) * len(plan)
        row = {"stimuli": n,
               "transform_ours_images_per_s": n / ours_t, "transform_baseline_images_per_s": n / base_t,
               "transform_ratio": base_t / ours_t,
               "build_ours_images_per_s": n / ours, "build_baseline_images_per_s": n / base, "build_ratio": base / ours}
        result["build"][name] = row
        print(f"{name:<16}{n:>8}"
              f"{n / ours_t:>12.1f}{n / base_t:>12.1f}{base_t / ours_t:>9.2f}x"
              f"{n / ours:>12.1f}{n / base:>12.1f}{base / ours:>9.2f}x")
    ours, base = time_metrics(images, workers)
    result["metrics"] = {"ours_images_per_s": len(images) / ours, "baseline_images_per_s": len(images) / base,
                         "ratio": base / ours}
    print(f"quality metrics (Table 2 rows): ours {result['metrics']['ours_images_per_s']:.2f} images/s, "
          f"baseline {result['metrics']['baseline_images_per_s']:.2f} images/s, ratio {result['metrics']['ratio']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
