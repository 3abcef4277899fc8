"""``cuebench benchmark tf_efficientnet_lite0`` on the bundled benchmarks (suppression and cue decomposition on
the bundled photos), from a cold cache and a warm one, against a bare timm loop over the same images.

Cold: build the experiments (timed apart), load the model once, answer every trial of every benchmark with it,
score. Warm: the same command again; every response is stored, so the model is not even loaded. Bare: ``timm``
model (the same offline weights), PIL decode, resize, normalise and forward over every unique stimulus file,
batch 64, nothing stored. torch and timm are imported before either is timed (a process start's cost, paid
once by both). Prints the seconds of each phase, images per second of the cold model work and of the bare
loop, and their ratio (goal >= 0.9x; the bare loop runs last, so it alone finds the kernels warmed up); the
warm run must answer nothing.

    python benchmarks/bench_scorecard.py --eed-steps 64
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from analysis.benchmarks import BENCHMARKS
from cuebench_app.benchmark import answer, prepare, score_model
from model_eval.observers import check_spec

MODEL = "tf_efficientnet_lite0"
BUNDLED = [bench() for _, bench in BENCHMARKS.items() if bench.shared is None]


def bare_timm_loop(files: list[Path], device: str, batch: int = 64) -> float:
    """Seconds to push every file through the model with the plainest loop (weights as eval loads them)."""
    import torch
    from PIL import Image

    from model_eval.observers import load_observer

    observer = load_observer(MODEL, device)
    model, config = observer.model.eval(), observer.data_config
    size = tuple(config["input_size"][1:])
    mean = torch.tensor(config["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(config["std"]).view(1, 3, 1, 1)
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(files), batch):
            arrays = [np.asarray(Image.open(f).convert("RGB").resize(size[::-1], Image.BILINEAR), dtype=np.float32)
                      for f in files[i:i + batch]]
            x = (torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2) / 255.0 - mean) / std
            model(x.to(device)).softmax(-1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eed-steps", type=int, default=64, help="EED steps of the cue-decomposition build")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    args = parser.parse_args()
    settings = SimpleNamespace(batch_size=64, device=args.device, executor="local", executor_option=[])
    check_spec(MODEL)  # imports torch and timm
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        start = time.perf_counter()
        built = [(bench, *prepare(bench, cache, cache, None, args.eed_steps)) for bench in BUNDLED]
        seconds_build = time.perf_counter() - start
        files = sorted({f for _, expdir, _ in built for f in (expdir / "stimuli").rglob("*") if f.is_file()})

        def answer_and_score() -> tuple[float, float]:
            answering = scoring = 0.0
            loaded = {}  # as `cuebench benchmark` does: one load per run
            for bench, expdir, digest in built:
                start = time.perf_counter()
                observers = answer(expdir, [MODEL], settings, loaded, rule=bench.decision_rule)
                middle = time.perf_counter()
                score_model(bench, expdir, digest, observers[MODEL])
                answering, scoring = answering + middle - start, scoring + time.perf_counter() - middle
            return answering, scoring

        (cold_answer, cold_score), (warm_answer, warm_score) = answer_and_score(), answer_and_score()
        seconds_bare = bare_timm_loop(files, args.device)
    print(f"bundled benchmarks {', '.join(b.name for b in BUNDLED)}: {len(files)} unique stimulus images")
    print(f"build (once per stimulus set): {seconds_build:.1f} s")
    print(f"cold: answering {cold_answer:.1f} s = {len(files) / cold_answer:.1f} images/s (one model load "
          f"included), scoring {cold_score:.1f} s")
    print(f"warm: answering {warm_answer:.1f} s (no model work), scoring {warm_score:.1f} s")
    print(f"bare timm loop: {seconds_bare:.1f} s = {len(files) / seconds_bare:.1f} images/s (model loaded before)")
    print(f"cold answering / bare loop, images per second: {seconds_bare / cold_answer:.2f}x")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"device": args.device, "images": len(files), "seconds_build": seconds_build,
                       "cold_answering_s": cold_answer, "warm_answering_s": warm_answer, "bare_s": seconds_bare,
                       "ratio": seconds_bare / cold_answer}, fh, indent=2)


if __name__ == "__main__":
    main()
