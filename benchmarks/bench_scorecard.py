"""``cuebench benchmark tf_efficientnet_lite0`` on the bundled benchmarks (suppression and cue decomposition on
the bundled photos) or on named ones (``--benchmarks cue-conflict``: the full 1,280 shared images), from a cold
cache and a warm one, against a bare timm loop over the same images.

Cold: build the experiments (timed apart), load the model once, answer every trial of every benchmark with it
in one stream of batches (decoding the stimuli into each experiment's cache on the way), score. Warm: the
same command again; every response is stored, so the model is not even loaded. Bare: ``timm`` model (the
same offline weights), PIL decode, resize, normalise and forward over every unique stimulus file, batch 64,
nothing stored. torch and timm are imported before either is timed (a process start's cost, paid once by
both).

On a shared machine one pass says more about the neighbours than about the code, so each of ``--repeat``
rounds runs the bare loop, a cold run on a fresh copy of the experiments (no cache, no responses) and the
bare loop again, and compares the cold run with the mean of the two loops around it, in wall-clock seconds
and in CPU seconds (this process's threads and its decoding processes; less sensitive to other jobs taking
the cores). Prints
each round, the median ratios (goal >= 0.9x), the load average before and after, and that the warm run
loaded no model and answered nothing.

    python benchmarks/bench_scorecard.py --eed-steps 64 --repeat 3
    python benchmarks/bench_scorecard.py --benchmarks cue-conflict --shared ../shared
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from analysis.benchmarks import BENCHMARKS
from cuebench_app.benchmark import answer, prepare, score_model
from model_eval.allocator import keep_freed_memory
from model_eval.observers import check_spec

MODEL = "tf_efficientnet_lite0"
BUNDLED = ",".join(name for name, bench in BENCHMARKS.items() if bench.shared is None)


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its finished children (decoding processes)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def bare_timm_loop(files: list[Path], device: str, batch: int = 64) -> tuple[float, float]:
    """(wall, CPU) seconds to push every file through the model with the plainest loop (weights as eval loads
    them, into timm's module unchanged, loaded before the clock starts)."""
    import torch
    from PIL import Image

    from model_eval.models import load_model

    loaded = load_model(MODEL, device)  # timm's module as it is: no batch norm folded, as a plain script runs it
    model, config = loaded.model.eval(), loaded.data_config
    size = tuple(config["input_size"][1:])
    mean = torch.tensor(config["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(config["std"]).view(1, 3, 1, 1)
    wall, cpu = time.perf_counter(), cpu_seconds()
    with torch.inference_mode():
        for i in range(0, len(files), batch):
            arrays = [np.asarray(Image.open(f).convert("RGB").resize(size[::-1], Image.BILINEAR), dtype=np.float32)
                      for f in files[i:i + batch]]
            x = (torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2) / 255.0 - mean) / std
            model(x.to(device)).softmax(-1).cpu()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def fresh_copy(built: list, root: Path) -> list:
    """The built experiments copied without their decoded cache, responses and answered-model record: a cold
    start for the same stimuli."""
    skip = shutil.ignore_patterns("cache", "responses.sqlite*", "scorecard_observers.json")
    return [(bench, shutil.copytree(expdir, root / expdir.name, ignore=skip), digest) for bench, expdir, digest in built]


def answer_and_score(built: list, settings, loaded: dict) -> tuple[float, float, float]:
    """(wall, CPU) seconds answering and wall seconds scoring every benchmark of ``built``, as
    ``cuebench benchmark`` does: one model load per run, kept in ``loaded``, answering all benchmarks in one
    stream of batches."""
    start, start_cpu = time.perf_counter(), cpu_seconds()
    answered = answer([(expdir, bench.decision_rule) for bench, expdir, _ in built], [MODEL], settings, loaded)
    wall, cpu, middle = time.perf_counter() - start, cpu_seconds() - start_cpu, time.perf_counter()
    for (bench, expdir, digest), observers in zip(built, answered):
        score_model(bench, expdir, digest, observers[MODEL])
    return wall, cpu, time.perf_counter() - middle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", default=BUNDLED, help=f"comma-separated (default: the bundled ones, {BUNDLED})")
    parser.add_argument("--shared", default=None, help="the shared data folder (default: $CUEBENCH_SHARED or ../shared)")
    parser.add_argument("--eed-steps", type=int, default=64, help="EED steps of the cue-decomposition build")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of bare loop, cold run, bare loop")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    args = parser.parse_args()
    settings = SimpleNamespace(batch_size=64, device=args.device, executor="local", executor_option=[])
    check_spec(MODEL)  # imports torch and timm
    keep_freed_memory()  # what a cold run sets on a CPU: the loops run with the same allocator from the first
    load_before = os.getloadavg()[0]
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        start = time.perf_counter()
        benches = [BENCHMARKS[name.strip()]() for name in args.benchmarks.split(",")]
        shared = Path(args.shared or os.environ.get("CUEBENCH_SHARED", "../shared")).absolute()
        built = [(bench, *prepare(bench, shared, cache, None, args.eed_steps)) for bench in benches]
        seconds_build = time.perf_counter() - start
        files = sorted({f for _, expdir, _ in built for f in (expdir / "stimuli").rglob("*") if f.is_file()})
        for k in range(args.repeat):
            before = bare_timm_loop(files, args.device)
            run = fresh_copy(built, cache / f"round-{k}")
            cold = answer_and_score(run, settings, {})
            after = bare_timm_loop(files, args.device)
            bare = [(b + a) / 2 for b, a in zip(before, after)]
            rounds.append({"bare_before_s": before, "bare_after_s": after, "cold_answering_s": cold[:2],
                           "scoring_s": cold[2], "ratio_wall": bare[0] / cold[0], "ratio_cpu": bare[1] / cold[1]})
            print(f"round {k + 1}: bare {before[0]:.1f} s, cold answering {cold[0]:.1f} s (one model load included), "
                  f"bare {after[0]:.1f} s -> {bare[0] / cold[0]:.2f}x wall; CPU {before[1]:.1f} / {cold[1]:.1f} / "
                  f"{after[1]:.1f} s -> {bare[1] / cold[1]:.2f}x; scoring {cold[2]:.1f} s")
        loaded: dict = {}
        warm = answer_and_score(run, settings, loaded)
    load_after = os.getloadavg()[0]
    wall, cpu = (float(np.median([r[key] for r in rounds])) for key in ("ratio_wall", "ratio_cpu"))
    print(f"benchmarks {', '.join(b.name for b in benches)}: {len(files)} unique stimulus images; "
          f"build (once per stimulus set) {seconds_build:.1f} s")
    print(f"cold answering / bare loop, median of {len(rounds)} round(s): {wall:.2f}x wall-clock, {cpu:.2f}x CPU "
          f"(goal >= 0.9x); load average {load_before:.1f} before, {load_after:.1f} after")
    print(f"warm: answering {warm[0]:.2f} s, {'no model loaded' if not loaded else 'A MODEL WAS LOADED'}, "
          f"scoring {warm[2]:.1f} s")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"device": args.device, "benchmarks": args.benchmarks, "images": len(files),
                       "seconds_build": seconds_build, "rounds": rounds, "ratio_wall": wall, "ratio_cpu": cpu,
                       "warm_answering_s": warm[0], "warm_loaded_model": bool(loaded),
                       "load_average": [load_before, load_after]}, fh, indent=2)


if __name__ == "__main__":
    main()
