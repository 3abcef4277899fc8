"""Quality of the offline feature networks for DiST texture synthesis, against the released images.

For the first ``--originals`` originals of a DiST release (sorted by name) it synthesises two
versions per original with each feature network (the ``--design dist`` recipe: Gram synthesis,
``--steps`` L-BFGS synthesis steps from 0.1-scaled noise, at the original's 224 px) and compares
them with the release's own two versions of the same originals:

- texture kept: the uncapped LV and HFE ratios of each version to its original (Burgert et al.
  2025, App. A, Eqs. 1 and 3), their medians, and the share of versions inside the 5-95 % band of
  the release's own ratios (``train-cues``' quality gate, band from the release's originals
  101-200, so the compared originals are not in it);
- structure gone: GC, the gradient correlation with the original (``stimuli.quality``; near 0);
- how the triplets read to a model: oddity accuracy of ``--observer`` (penultimate features,
  the oddity rule of ``model_eval.decisions``) on the triplets original + two versions.

    python benchmarks/bench_feature_nets.py --dist ../shared/data/dist --originals 12

prints one row per source (the release, then each network) and, with ``--json``, writes them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

FEATURE_NETS = ("tf_efficientnet_lite0", "tf_efficientnet_lite1", "tf_efficientnet_lite2")


def read_release(root: Path, count: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(stems, originals (n, 224, 224, 3), released versions (n, 2, 224, 224, 3)) of the first ``count``
    originals, each fitted to the 224 px stimulus square as the importer's consumers see it."""
    from cuebench.images import decode_image
    from stimuli.sources import fit_to_stimulus

    files = sorted((root / "original").iterdir())[:count]
    originals = np.stack([fit_to_stimulus(decode_image(f)) for f in files])
    versions = np.stack([[fit_to_stimulus(decode_image(next((root / part).glob(f.stem + ".*"))))
                          for part in ("set1", "set2")] for f in files])
    return [f.stem for f in files], originals, versions


def oddity_accuracy(observer, originals: np.ndarray, versions: np.ndarray) -> float:
    """Share of triplets (original first) whose odd one by the oddity rule is the original."""
    import torch

    from model_eval.decisions import decide_oddity

    mean = torch.tensor(observer.data_config["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(observer.data_config["std"]).view(1, 3, 1, 1)
    correct = 0
    for original, pair in zip(originals, versions):
        batch = torch.from_numpy(np.stack([original, *pair])).permute(0, 3, 1, 2).float() / 255.0
        features = observer.features((batch - mean) / std).numpy()
        correct += decide_oddity(features).response == "1"
    return correct / len(originals)


def summary(originals: np.ndarray, versions: np.ndarray, band: np.ndarray, observer) -> dict:
    from stimuli.cue_training_sets import texture_ratios
    from stimuli.quality import quality_metrics

    flat_originals = np.repeat(originals, 2, axis=0)
    flat_versions = versions.reshape(-1, *versions.shape[2:])
    ratios = texture_ratios(flat_originals, flat_versions)
    inside = ((ratios >= band[:, 0]) & (ratios <= band[:, 1])).all(axis=1)
    gc = [quality_metrics(o, v)["GC"] for o, v in zip(flat_originals, flat_versions)]
    return {"LV_ratio_median": round(float(np.median(ratios[:, 0])), 3),
            "HFE_ratio_median": round(float(np.median(ratios[:, 1])), 3),
            "share_inside_band": round(float(inside.mean()), 3), "GC_max": round(float(np.max(gc)), 3),
            "oddity_accuracy": round(oddity_accuracy(observer, originals, versions), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, required=True, help="DiST release: original/, set1/, set2/")
    parser.add_argument("--originals", type=int, default=12)
    parser.add_argument("--steps", type=int, default=100, help="synthesis steps (L-BFGS iterations)")
    parser.add_argument("--feature-nets", default=",".join(FEATURE_NETS))
    parser.add_argument("--observer", default="tf_efficientnet_lite0", help="model whose oddity answers are scored")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from cuebench_app.feature_nets import load_feature_net
    from model_eval.observers import load_observer
    from stimuli.texture_synthesis import NOISE_SCALE, synthesize

    stems, originals, released = read_release(args.dist, args.originals)
    band = band_of(args.dist, 100, 200)  # disjoint from the compared originals
    observer = load_observer(args.observer, args.device)
    rows = {"DiST release (VGG-19)": {**summary(originals, released, band, observer), "seconds_per_image": None}}
    for name in args.feature_nets.split(","):
        net = load_feature_net(name, args.device)
        seeds = [[1000 + 2 * i, 1001 + 2 * i] for i in range(len(originals))]
        start = time.perf_counter()
        made = [synthesize(originals, [s[k] for s in seeds], net, steps=args.steps, noise_scale=NOISE_SCALE).images
                for k in range(2)]
        seconds = (time.perf_counter() - start) / (2 * len(originals))
        rows[name] = {**summary(originals, np.stack(made, axis=1), band, observer),
                      "seconds_per_image": round(seconds, 2)}
    print(f"{len(stems)} DiST originals ({stems[0]} .. {stems[-1]}), {args.steps} synthesis steps, "
          f"band LV {band[0, 0]:.2f}-{band[0, 1]:.2f}, HFE {band[1, 0]:.2f}-{band[1, 1]:.2f}, observer {args.observer}")
    columns = ["LV_ratio_median", "HFE_ratio_median", "share_inside_band", "GC_max", "oddity_accuracy",
               "seconds_per_image"]
    print("| source | " + " | ".join(columns) + " |")
    for source, row in rows.items():
        print(f"| {source} | " + " | ".join("-" if row[c] is None else str(row[c]) for c in columns) + " |")
    if args.json:
        args.json.write_text(json.dumps({"originals": stems, "steps": args.steps, "rows": rows}, indent=1))


def band_of(root: Path, start: int, stop: int) -> np.ndarray:
    """The 5-95 % band of the release's own LV and HFE ratios over its originals ``start``..``stop``-1."""
    from stimuli.cue_training_sets import SYNTHESIS_SIZE, resize_all, texture_ratios
    from cuebench.images import decode_image

    names = sorted(f.name for f in (root / "original").iterdir())[start:stop]
    pairs = [(root / "original" / n, next((root / part).glob(Path(n).stem + ".*"))) for n in names
             for part in ("set1", "set2")]
    originals = resize_all(np.stack([decode_image(o) for o, _ in pairs]), SYNTHESIS_SIZE)
    versions = resize_all(np.stack([decode_image(v) for _, v in pairs]), SYNTHESIS_SIZE)
    return np.percentile(texture_ratios(originals, versions), [5, 95], axis=0).T


if __name__ == "__main__":
    main()
