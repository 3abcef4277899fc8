"""Segmentation cue decomposition at scale: EED per megapixel-step, and ``cuebench eval``'s
segmentation path against a bare torchvision loop on the same images, in one run.

1. EED (``stimuli.eed.eed``, the shape cue's cost: 5,792 steps per image in the paper) on
   ``--images`` random photos of ``--size`` (default 256x512, a quarter-size Cityscapes frame),
   reported as milliseconds per megapixel-step; multiply by 5,792 and by the megapixels of a
   set (500 Cityscapes frames at 2048x1024: 1,049 MP) for a full study.
2. Evaluation: ``model_eval.evaluate.evaluate_experiment`` on a segmentation experiment of the
   same images (stimuli already decoded into the cache by a first run): read the pixels,
   normalise on the device, forward, argmax, score each label map against its mask and commit
   every row; against the same model (lraspp_mobilenet_v3_large, random weights, 19 classes)
   in memory, fed the same images as normalised tensors with the same batch size under
   ``torch.inference_mode``, argmax on the device. The ratio ours / bare is the share of model
   speed the whole path keeps (goal >= 0.9).

    OMP_NUM_THREADS=1 python benchmarks/bench_seg_cues.py --images 8 --steps 32
    python benchmarks/bench_seg_cues.py --device cuda --images 64 --size 1024x2048 --steps 256
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

CLASSES = [f"class{k}" for k in range(19)]


def photos(count: int, height: int, width: int) -> np.ndarray:
    """Smooth random regions with fine noise: what EED has to work through."""
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, size=(count, height // 32 + 1, width // 32 + 1, 3)).astype(np.uint8)
    up = coarse.repeat(32, axis=1).repeat(32, axis=2)[:, :height, :width]
    return np.clip(up + rng.normal(0, 8, up.shape), 0, 255).astype(np.uint8)


def time_eed(images: np.ndarray, steps: int, device: str) -> float:
    """Milliseconds per megapixel-step (after one warm-up step, so compilation is not counted)."""
    from stimuli.eed import eed

    eed(images[:1], 1, device=device, progress=False)
    start = time.perf_counter()
    eed(images, steps, device=device, progress=False)
    seconds = time.perf_counter() - start
    megapixels = images.shape[0] * images.shape[1] * images.shape[2] / 1e6
    return 1000 * seconds / (megapixels * steps)


def segmentation_experiment(root: Path, images: np.ndarray) -> list[np.ndarray]:
    """An experiment of ``segment`` trials on ``images`` with random label masks."""
    from cuebench.expdir import ExperimentDir
    from cuebench.trial_types.segment import SEGMENT_ANSWER
    from cuebench.trials import Experiment, LabelSet, Trial

    expdir = ExperimentDir(root)
    rng = np.random.default_rng(1)
    stimuli, trials = {}, []
    for k, image in enumerate(images):
        photo = expdir.write_stimulus(image, {"source_image": f"p{k}", "transform": "bench"})
        mask = expdir.write_stimulus(rng.integers(0, 19, size=image.shape[:2]).astype(np.uint8),
                                     {"source_image": f"p{k}", "transform": "label_mask"})
        stimuli[photo.id], stimuli[mask.id] = photo, mask
        trials.append(Trial(trial_id=f"t{k}", trial_type="segment", role="test", stimuli=(photo.id,),
                            choices=(SEGMENT_ANSWER,), label_mask=mask.id))
    labels = LabelSet(name="bench", labels=tuple(CLASSES), display_order="given", not_clear=False)
    expdir.save(Experiment(name="bench", design="bench", label_set=labels, stimuli=stimuli, trials=trials))
    return images


def checkpoint(folder: Path) -> Path:
    import torch

    from model_eval.observers.torchvision_models import import_torchvision

    torch.manual_seed(0)
    model = import_torchvision().models.get_model("lraspp_mobilenet_v3_large", weights=None, weights_backbone=None,
                                                  num_classes=len(CLASSES))
    path = folder / "lraspp.pth"
    torch.save(model.state_dict(), path)
    path.with_suffix(".json").write_text(json.dumps({"classes": CLASSES}))
    return path


def bare_seconds(path: Path, images: np.ndarray, batch_size: int, device: str) -> float:
    """The model alone on normalised tensors: forward and argmax per batch."""
    import torch

    from model_eval.observers import load_observer

    observer = load_observer(f"lraspp_mobilenet_v3_large:{path}", device)
    mean = torch.tensor(observer.data_config["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(observer.data_config["std"], device=device).view(1, 3, 1, 1)
    batches = [((torch.from_numpy(images[i:i + batch_size]).permute(0, 3, 1, 2).float().to(device) / 255) - mean) / std
               for i in range(0, len(images), batch_size)]
    with torch.inference_mode():
        observer.model(batches[0][:1])
        start = time.perf_counter()
        for batch in batches:
            observer.model(batch)["out"].argmax(dim=1).cpu()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", default="256x512", help="HEIGHTxWIDTH")
    parser.add_argument("--steps", type=int, default=32, help="EED steps timed")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="also write the results as JSON")
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.split("x"))
    images = photos(args.images, height, width)

    per_mp_step = time_eed(images, args.steps, args.device)
    study = per_mp_step * 5792 * 500 * 2048 * 1024 / 1e6 / 1000 / 3600
    print(f"EED on {args.device}: {per_mp_step:.1f} ms per megapixel-step ({args.images} images of {height}x{width}, "
          f"{args.steps} steps); 500 Cityscapes frames x 5,792 steps: {study:.1f} h")

    from model_eval.evaluate import evaluate_experiment

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        segmentation_experiment(folder / "exp", images)
        path = checkpoint(folder)
        spec = f"lraspp_mobilenet_v3_large:{path}"
        evaluate_experiment(folder / "exp", [spec], batch_size=args.batch_size, device=args.device, progress=False)
        (folder / "exp" / "responses.sqlite").unlink()  # steady state: decoded cache kept, answers made again
        summary = evaluate_experiment(folder / "exp", [spec], batch_size=args.batch_size, device=args.device,
                                      progress=False)
        ours = summary.runs[0].seconds_answering + summary.runs[0].seconds_decoding
        bare = bare_seconds(path, images, args.batch_size, args.device)
    print(f"evaluation: ours {args.images / ours:.2f} images/s, bare torchvision loop {args.images / bare:.2f} "
          f"images/s, ratio {bare / ours:.2f}x (goal >= 0.9)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"device": args.device, "images": args.images, "size": args.size, "eed_steps": args.steps,
                       "eed_ms_per_megapixel_step": per_mp_step, "ours_images_per_s": args.images / ours,
                       "bare_images_per_s": args.images / bare, "ratio": bare / ours}, fh, indent=2)


if __name__ == "__main__":
    main()
