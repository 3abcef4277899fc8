"""EED throughput: stimuli.eed (numba kernels on a CPU, Triton kernels on CUDA) against
the per-image reference structure (stimuli.eed_reference: one image, one step, one channel
at a time), same inputs, same run.

Prints image-steps per second (and milliseconds per image-step) of both at the chosen size,
their ratio, and the maximum absolute pixel difference (0-255, before clipping) between the
two after --agree-steps steps, limiter on and off. With --full-run N the batched path also
diffuses N images for --full-steps steps (the GPU goal: 1,280 images x 16,384 steps in
under 60 s on one H100); with --full-budget S a run that a first 256-step probe says would
outlast S seconds times only the steps that fit and projects the rest (the loop is the same
step after step), so a short device loan still gets a number. Threads: as many as torch uses
(OMP_NUM_THREADS).

    OMP_NUM_THREADS=1 python benchmarks/bench_eed.py                 # CPU, 224x224
    python benchmarks/bench_eed.py --device cuda --batch 1280 --full-run 1280

--variants A,B,... (CUDA) also times each layout of the Triton kernels (``stimuli.eed_triton.VARIANTS``)
on the same batch, ms per step (--variant-steps steps, the images already on the device, after a first
untimed step), with each one's agreement to the reference, so one device run both
measures them and says which to make ``DEFAULT_VARIANT`` (the one ``cuebench`` and the full run use).
The reference's 512 steps run in worker processes while the device works, and the results file is
rewritten after every phase, so a run stopped by a time cap keeps what it measured.

--profile FILE runs the batched timing once more under torch.profiler (benchmarks/torch_profile.py):
launches per step, the kernels' time, occupancy and the bandwidth of the least traffic a step needs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from torch_profile import profiled

RESERVE_S = 25.0
"""Seconds ``--deadline`` keeps for what comes after the full run: the profile and the agreement checks."""


def photos(n: int, size: int) -> np.ndarray:
    """n real photos (the embedded default set, repeated if needed) at size x size."""
    from PIL import Image

    from stimuli.sources import default_images, fit_to_stimulus

    base = [fit_to_stimulus(s.read()) for s in default_images()]
    out = [np.asarray(Image.fromarray(base[i % len(base)]).resize((size, size), Image.BICUBIC)) for i in range(n)]
    return np.stack(out)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_batched(images: np.ndarray, steps: int, device: str) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds of this process) of ``steps`` steps of ``images``. On a shared machine the
    CPU seconds hardly change with other processes' load, the wall-clock ones do."""
    from stimuli.eed import diffuse

    diffuse(images[:1], 1, device=device, progress=False)  # warm-up: allocator, kernels
    sync(device)
    start, cpu = time.perf_counter(), time.process_time()
    diffuse(images, steps, device=device, progress=False)
    sync(device)
    return time.perf_counter() - start, time.process_time() - cpu


def time_full_run(images: np.ndarray, steps: int, device: str, budget: float | None) -> dict:
    """Seconds for ``steps`` steps of ``images``: measured, or projected from the most steps ``budget`` allows."""
    probe = min(steps, 256)
    seconds = time_batched(images, probe, device)[0]
    timed = steps
    if probe < steps and budget is not None:
        timed = max(probe, min(steps, int(budget / seconds * probe) // probe * probe))
    if timed > probe:
        seconds = time_batched(images, timed, device)[0]
    return {"images": len(images), "steps": steps, "timed_steps": timed, "timed_seconds": seconds,
            "seconds": seconds * steps / timed}


def time_reference(images: np.ndarray, steps: int) -> float:
    from stimuli.eed_reference import diffuse_one

    start = time.perf_counter()
    for image in images:
        diffuse_one(image, steps)
    return time.perf_counter() - start


def reference_runs(images: np.ndarray, steps: int, pool: ProcessPoolExecutor) -> dict:
    """``limit -> futures of the reference's raw images`` after ``steps`` steps, limiter on and off, one image
    per worker: the reference takes tens of seconds per image at 224x224, the device a fraction of that."""
    from stimuli.eed import EEDParams
    from stimuli.eed_reference import diffuse_one

    return {limit: [pool.submit(diffuse_one, image, steps, EEDParams(limit=limit)) for image in images]
            for limit in (True, False)}


def agreement(images: np.ndarray, steps: int, device: str, reference: dict, variant: str | None = None) -> dict:
    """``limit -> max |batched - reference|`` (0-255) after ``steps`` steps: ``stimuli.eed.diffuse`` or, with
    ``variant``, that layout of the Triton kernels."""
    from stimuli.eed import EEDParams, diffuse

    out = {}
    for limit in (True, False):
        params = EEDParams(limit=limit)
        if variant is None:
            batched = diffuse(images, steps, params=params, device=device, progress=False)[steps]
        else:
            batched = run_variant(images, steps, device, variant, params).cpu().permute(0, 2, 3, 1).numpy()
        expected = np.stack([future.result() for future in reference[limit]])
        out[limit] = float(np.abs(batched.astype(np.float64) - expected).max())
    return out


def variant_stepper(images: np.ndarray, device: str, variant: str, params=None):
    """(stepper, device tensor (N, 3, H, W), limiter bounds) for one kernel layout, as ``diffuse`` sets them up."""
    import torch

    from stimuli.eed import EEDParams
    from stimuli.eed_triton import Stepper

    params = params or EEDParams()
    u = torch.as_tensor(np.ascontiguousarray(images.transpose(0, 3, 1, 2)), dtype=torch.float32, device=device)
    bounds = (u.amin(dim=(2, 3), keepdim=True), u.amax(dim=(2, 3), keepdim=True)) if params.limit else None
    return Stepper(images.shape[1], images.shape[2], params, u.device, variant), u, bounds


def run_variant(images: np.ndarray, steps: int, device: str, variant: str, params=None):
    """The device tensor (N, 3, H, W) after ``steps`` steps of one kernel layout."""
    import torch

    stepper, u, bounds = variant_stepper(images, device, variant, params)
    with torch.inference_mode():
        return stepper(u, steps, bounds)


def time_variant(images: np.ndarray, steps: int, device: str, variant: str) -> dict:
    """Milliseconds per step of ``images`` in one kernel layout: the steps alone, after one untimed step (its
    compilation, the buffers), the images already on the device."""
    import torch

    stepper, u, bounds = variant_stepper(images, device, variant)
    with torch.inference_mode():
        u = stepper(u, 1, bounds)
        sync(device)
        start = time.perf_counter()
        stepper(u, steps, bounds)
        sync(device)
    seconds = time.perf_counter() - start
    return {"ms_per_step": 1e3 * seconds / steps, "image_steps_per_s": len(images) * steps / seconds}


def save(result: dict, path: str | None) -> None:
    """Write what has been measured so far (again after every phase)."""
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8, help="images in the batched timing run")
    parser.add_argument("--baseline-images", type=int, default=2, help="images in the per-image timing run")
    parser.add_argument("--steps", type=int, default=16, help="steps in each timing run")
    parser.add_argument("--agree-images", type=int, default=2)
    parser.add_argument("--agree-steps", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", default=None,
                        help="comma-separated layouts of the CUDA kernels to time side by side (stimuli.eed_triton)")
    parser.add_argument("--variant-steps", type=int, default=64, help="steps in each layout's timing run")
    parser.add_argument("--full-run", type=int, default=0, help="also time this many images for --full-steps")
    parser.add_argument("--full-steps", type=int, default=16384)
    parser.add_argument("--full-budget", type=float, default=None,
                        help="seconds the full run may take; beyond them it is projected from fewer steps")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds the whole run may take (a time cap around it): the full run's budget shrinks "
                             "to leave time for the agreement checks")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    parser.add_argument("--profile", default=None, metavar="FILE",
                        help="profile the batched run once more (untimed) and write the summary here")
    args = parser.parse_args()

    import torch

    variants = [v for v in (args.variants or "").split(",") if v]
    if variants:
        from stimuli.eed_triton import DEFAULT_VARIANT, VARIANTS

        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            parser.error(f"unknown --variants {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    cuda = args.device.startswith("cuda")
    start = time.perf_counter()
    # on a GPU machine the reference runs on idle cores while the device works; on a CPU after the timings
    pool = ProcessPoolExecutor(max_workers=2 * args.agree_images, mp_context=multiprocessing.get_context("spawn")) \
        if args.agree_steps else None
    reference = reference_runs(photos(args.agree_images, args.size), args.agree_steps, pool) if cuda and pool else None
    result = {"size": args.size, "batch": args.batch, "device": args.device, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine()}
    if cuda:
        result["gpu"] = torch.cuda.get_device_name(0)
    reference_s = time_reference(photos(args.baseline_images, args.size), args.steps)
    result["reference_image_steps_per_s"] = args.baseline_images * args.steps / reference_s
    if variants:
        result["default_variant"] = DEFAULT_VARIANT
        result["variants"] = {}
        images = photos(args.batch, args.size)
        for name in variants:
            try:
                timed = time_variant(images, args.variant_steps, args.device, name)
            except Exception as err:  # a layout the device's Triton cannot compile: the others still run
                result["variants"][name] = {"error": f"{type(err).__name__}: {err}"[:500]}
                print(f"kernel layout {name}: FAILED, {result['variants'][name]['error']}")
                continue
            result["variants"][name] = timed
            print(f"kernel layout {name:12s} ({VARIANTS[name]}): {timed['ms_per_step']:8.3f} ms per step of "
                  f"{args.batch} images ({timed['image_steps_per_s']:.0f} image-steps/s)")
            save(result, args.out)
        ran = [name for name in variants if "error" not in result["variants"][name]]
        variants = ran
        if not ran:
            raise SystemExit("no kernel layout ran")
        result["fastest_variant"] = min(ran, key=lambda name: result["variants"][name]["ms_per_step"])
        print(f"fastest layout: {result['fastest_variant']} (DEFAULT_VARIANT in stimuli/eed_triton.py, used below: "
              f"{DEFAULT_VARIANT})")
        save(result, args.out)
    batched_s, batched_cpu_s = time_batched(photos(args.batch, args.size), args.steps, args.device)
    result["batched_image_steps_per_s"] = args.batch * args.steps / batched_s
    result["ratio"] = result["batched_image_steps_per_s"] / result["reference_image_steps_per_s"]
    print(f"EED {args.size}x{args.size} on {args.device}, {result['threads']} thread(s): batched ({args.batch} images) "
          f"{result['batched_image_steps_per_s']:.1f} image-steps/s ({1e3 / result['batched_image_steps_per_s']:.3f} "
          f"ms each), per-image reference {result['reference_image_steps_per_s']:.1f} image-steps/s "
          f"({1e3 / result['reference_image_steps_per_s']:.2f} ms each), ratio {result['ratio']:.1f}x")
    if args.device == "cpu":
        result["batched_cpu_ms_per_image_step"] = 1e3 * batched_cpu_s / (args.batch * args.steps)
        print(f"batched CPU time: {result['batched_cpu_ms_per_image_step']:.3f} ms per image-step "
              f"(all threads together; wall-clock above is what a shared machine's load leaves)")
    save(result, args.out)
    if args.full_run:
        budget = args.full_budget
        if budget is not None and args.deadline is not None:  # what is left, less the checks still to come
            budget = min(budget, args.deadline - (time.perf_counter() - start) - RESERVE_S)
        full = time_full_run(photos(args.full_run, args.size), args.full_steps, args.device, budget)
        result["full_run"] = full
        how = "" if full["timed_steps"] == full["steps"] else f", projected from {full['timed_steps']} steps"
        print(f"{args.full_run} images x {args.full_steps} steps: {full['seconds']:.1f} s "
              f"({args.full_run * args.full_steps / full['seconds']:.0f} image-steps/s{how})")
        save(result, args.out)
    if args.profile:
        from stimuli.eed import diffuse

        images = photos(args.batch, args.size)
        state_bytes = images.size * 4  # the float32 image state, read and written once per step at the least
        with profiled(args.profile, args.device, f"EED, {args.batch} images x {args.steps} steps",
                      steps=args.steps, min_bytes_per_step=2 * state_bytes):
            diffuse(images, args.steps, device=args.device, progress=False)
    if pool is not None:
        images = photos(args.agree_images, args.size)
        reference = reference or reference_runs(images, args.agree_steps, pool)
        result["agree_steps"] = args.agree_steps
        for limit, diff in agreement(images, args.agree_steps, args.device, reference).items():
            result["max_abs_difference" + ("" if limit else "_no_limit")] = diff
            print(f"max |batched - reference| after {args.agree_steps} steps, limiter {'on' if limit else 'off'}: "
                  f"{diff:.2e} (0-255 scale)")
        save(result, args.out)
        for name in variants:
            diffs = agreement(images, args.agree_steps, args.device, reference, name)
            result["variants"][name].update(max_abs_difference=diffs[True], max_abs_difference_no_limit=diffs[False])
            print(f"kernel layout {name}: max |batched - reference| after {args.agree_steps} steps "
                  f"{diffs[True]:.2e} (limiter on), {diffs[False]:.2e} (off)")
            save(result, args.out)
        pool.shutdown()


if __name__ == "__main__":
    main()
