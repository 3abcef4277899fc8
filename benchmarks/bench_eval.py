"""Images/s of the ``cuebench eval`` path against a bare timm loop, in one run.

Ours: ``model_eval.evaluate.evaluate_experiment`` (what ``cuebench eval`` calls) on an
experiment directory in steady state -- the stimuli already decoded into the
experiment's cache by a first run -- timed from the call to its return minus the model
loading, which is reported separately: read the cached pixels, resize/normalise on the
device, forward, decide, commit every row to SQLite. Baseline: the same model, already
in memory, fed the same images as already-preprocessed tensors with the same batch size
under ``torch.inference_mode`` -- the model's cost alone. The ratio ours / bare is the
share of model speed the whole path keeps (target >= 0.9). Both run with the allocator
setting ``cuebench eval`` applies on CPU; one bare run before it shows what that
setting is worth. The first (cold) run's decoding and the model loading are printed too.
On CPU the ratio of CPU seconds is printed as well: other processes sharing the cores
change it much less than the wall-clock ratio (ours then includes the model loading).

    OMP_NUM_THREADS=1 python benchmarks/bench_eval.py --images 256 --batch-size 64

--profile FILE runs ``evaluate_experiment`` once more under torch.profiler (benchmarks/torch_profile.py):
launches per batch, the kernels that take the time, host-to-device copies.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from torch_profile import profiled


def build_experiment(root: Path, count: int) -> list[Path]:
    """``count`` distinct 224x224 stimuli: random crops and mirrors of the bundled photos."""
    from cuebench.expdir import ExperimentDir
    from cuebench.trials import Experiment, LabelSet, Trial
    from stimuli.sources import DEFAULT_LABEL_INDICES, default_images, fit_to_stimulus

    expdir = ExperimentDir(root)
    rng = np.random.default_rng(0)
    sources = [(img.name, img.category, fit_to_stimulus(img.read())) for img in default_images()]
    labels = LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=DEFAULT_LABEL_INDICES)
    stimuli, trials = {}, []
    for k in range(count):
        name, category, image = sources[k % len(sources)]
        top, left = rng.integers(0, 33, size=2)
        crop = fit_to_stimulus(np.ascontiguousarray(image[top:top + 192, left:left + 192]))
        crop = np.ascontiguousarray(crop[:, ::-1]) if k % 2 else crop
        stim = expdir.write_stimulus(crop, {"source_image": name, "transform": "bench", "params": {"k": k}})
        stimuli[stim.id] = stim
        trials.append(Trial(trial_id=f"t{k}", trial_type="classify", role="test", stimuli=(stim.id,),
                            choices=tuple(labels.displayed()), correct=category, category=category))
    expdir.save(Experiment(name="bench", design="bench", label_set=labels, stimuli=stimuli, trials=trials))
    return [expdir.stimulus_path(stimuli[t.stimuli[0]]) for t in trials]


def bare_loop(model_spec: str, paths: list[Path], batch_size: int, device: str):
    """A timer for the model alone on preprocessed tensors (loaded, preprocessed and warmed up once)."""
    import torch

    from model_eval.models import load_model
    from model_eval.preprocess import preprocess_paths

    loaded = load_model(model_spec, device)
    batches = [preprocess_paths(paths[i:i + batch_size], loaded.data_config, device=device)
               for i in range(0, len(paths), batch_size)]
    cuda = device.startswith("cuda")

    def run() -> tuple[float, float]:
        """(wall-clock seconds, CPU seconds of this process)."""
        with torch.inference_mode():
            loaded.model(batches[0])
            if cuda:
                torch.cuda.synchronize()
            start, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                loaded.model(batch).softmax(-1).cpu()
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter() - start, time.process_time() - cpu

    return run


def our_path(expdir: Path, model_spec: str, batch_size: int, device: str, workers: int | None):
    """One ``evaluate_experiment`` call on a fresh response store: (wall-clock seconds without model loading,
    CPU seconds of the whole call, model loading included, its run)."""
    from model_eval.evaluate import evaluate_experiment

    for leftover in expdir.glob("responses.sqlite*"):  # a fresh store: nothing to skip
        leftover.unlink()
    start, cpu = time.perf_counter(), time.process_time()
    summary = evaluate_experiment(expdir, [model_spec], batch_size=batch_size, device=device, progress=False,
                                  workers=workers)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    (run,) = summary.runs
    return elapsed - run.seconds_loading, cpu, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tf_efficientnet_lite0")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternate the two paths this many times and keep each one's fastest run "
                             "(other work on a shared machine only ever slows a run down)")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    parser.add_argument("--profile", default=None, metavar="FILE",
                        help="profile one more steady-state run (untimed) and write the summary here")
    args = parser.parse_args()

    from model_eval.allocator import keep_freed_memory
    from model_eval.models import resolve_device
    from model_eval.torch_compat import import_timm

    import_timm()  # import cost is paid once per process by both paths; keep it out of both timings
    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        expdir = Path(tmp) / "bench"
        paths = build_experiment(expdir, args.images)
        bare_run = bare_loop(args.model, paths, args.batch_size, device)
        default_malloc = bare_run()[0] if device == "cpu" else None
        keep_freed_memory()  # what ``cuebench eval`` does on CPU; both paths run with it below
        _, _, cold = our_path(expdir, args.model, args.batch_size, device, args.workers)  # decodes into the cache
        bare_times, our_times, bare_cpu, our_cpu, loading = [], [], [], [], []
        for _ in range(args.repeats):
            wall, cpu = bare_run()
            bare_times.append(wall)
            bare_cpu.append(cpu)
            wall, cpu, run = our_path(expdir, args.model, args.batch_size, device, args.workers)
            our_times.append(wall)
            our_cpu.append(cpu)
            loading.append(run.seconds_loading)
        if args.profile:
            batches = -(-args.images // args.batch_size)
            with profiled(args.profile, device, f"cuebench eval, {args.images} images in {batches} batches",
                          steps=batches):
                our_path(expdir, args.model, args.batch_size, device, args.workers)
    bare, ours = min(bare_times), min(our_times)
    n = args.images
    print(f"device {device}, model {args.model}, {n} images, batch size {args.batch_size}, "
          f"best of {args.repeats} alternating runs")
    print(f"bare timm loop (preprocessed tensors, model only):   {n / bare:8.1f} images/s")
    print(f"cuebench eval, steady state (cache, decide, store): {n / ours:8.1f} images/s")
    print(f"ratio ours / bare: {bare / ours:.2f}x")
    if device == "cpu":  # CPU seconds hardly change when other processes share the cores; wall-clock does
        print(f"CPU-time ratio (ours includes model loading here): {min(bare_cpu) / min(our_cpu):.2f}x "
              f"({min(bare_cpu):.1f} s bare, {min(our_cpu):.1f} s ours)")
    print(f"first run: decoded {n} stimuli into the cache in {cold.seconds_decoding:.2f} s "
          f"({n / cold.seconds_decoding:.0f} images/s); model loading {min(loading):.2f} s per run (not in the ratio)")
    if default_malloc is not None:
        print(f"(bare loop before keeping freed memory, one run: {n / default_malloc:.1f} images/s, "
              f"{default_malloc / bare:.2f}x slower than with it)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"device": device, "model": args.model, "images": n, "batch_size": args.batch_size,
                       "bare_images_per_s": n / bare, "ours_images_per_s": n / ours, "ratio": bare / ours,
                       "decoding_images_per_s": n / cold.seconds_decoding, "seconds_loading": min(loading)},
                      fh, indent=2)


if __name__ == "__main__":
    main()
