"""Texture-synthesis throughput for DiST stimuli: seconds per synthesised 224 x 224 image,
batched (one optimisation over the batch, per-image losses) against one image at a time,
same images, same steps, same run; prints both and their ratio. With --ps it also times the
weight-free Portilla-Simoncelli backend per image.

Wen et al. report about 55 s per image on a V100 (VGG-19, Gatys et al.); the goal on a GPU
is under 1 s per image amortised at 100 steps:

    OMP_NUM_THREADS=1 python benchmarks/bench_synthesis.py                  # CPU, 5 steps, 8 images
    python benchmarks/bench_synthesis.py --device cuda --steps 100 --images 64
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np


def photos(n: int, size: int) -> np.ndarray:
    """n real photos (the embedded default set, repeated if needed) at size x size."""
    from PIL import Image

    from stimuli.sources import default_images, fit_to_stimulus

    base = [fit_to_stimulus(s.read()) for s in default_images()]
    return np.stack([np.asarray(Image.fromarray(base[i % len(base)]).resize((size, size), Image.BICUBIC))
                     for i in range(n)])


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--feature-net", default="tf_efficientnet_lite0")
    parser.add_argument("--ps", action="store_true", help="also time the Portilla-Simoncelli backend")
    args = parser.parse_args()

    import torch

    from cuebench_app.feature_nets import load_feature_net
    from stimuli.texture_synthesis import synthesize

    images = photos(args.images, args.size)
    seeds = list(range(args.images))
    net = load_feature_net(args.feature_net, args.device)
    synthesize(images[:1], seeds[:1], net, steps=1)  # warm-up: weights, allocator, kernels
    sync(args.device)

    def batched():
        synthesize(images, seeds, net, steps=args.steps)
        sync(args.device)

    def one_at_a_time():
        for image, seed in zip(images, seeds):
            synthesize(image[None], [seed], net, steps=args.steps)
        sync(args.device)

    t_batch, t_single = timed(batched), timed(one_at_a_time)
    result = {
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(args.device),
        "cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
        "feature_net": args.feature_net, "images": args.images, "size": args.size, "steps": args.steps,
        "batched_s_per_image": t_batch / args.images, "single_s_per_image": t_single / args.images,
        "speedup_batched_vs_single": t_single / t_batch,
        "batched_s_per_image_at_100_steps": t_batch / args.images * 100 / args.steps,
    }
    if args.ps:
        from stimuli.ps_synthesis import synthesize as ps_synthesize

        ps_steps = max(1, args.steps)
        t_ps = timed(lambda: ps_synthesize(images[:2], seeds[:2], steps=ps_steps, device=args.device))
        result.update({"ps_steps": ps_steps, "ps_s_per_image": t_ps / 2})
    if args.device == "cpu":
        result["note"] = "CPU only: no GPU was available for this run, so the GPU goal is not measured"
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
