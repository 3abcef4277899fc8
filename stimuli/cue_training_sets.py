"""A cue study's stimuli, made once from labelled photos, a DiST release and cue-conflict images.

The photos are split per class into train / val / test; the training photos get structure-disrupted
versions for DiSTinguish made like DiST's own by the project's Gram texture synthesis, batched, on the
GPU when there is one (200 synthesis steps = DiSTinguish-A, Wen et al. 2024, App. A.2), refused when
they look like noise rather than DiST's images; and two experiment directories are built: DiST oddity
trials of originals the models never train on and Geirhos et al.'s cue-conflict images whose shape and
texture categories are both among the trained classes. What the study folder holds is named in the
core (``cuebench.studies``), so the training (``model_eval.training.cue_study``) reads it from there;
``cuebench train-cues`` (the app layer) hands in the feature network's loader.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
from pathlib import Path

import numpy as np

from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir, atomic_write
from cuebench.imagenet16 import IMAGENET16_INDICES
from cuebench.paths import recorded_path
from cuebench.studies import CUE_MAPPING_FILE, CUE_PHOTOS_FILE, CueStudy, StudyDir

from .texture_synthesis import STEPS_PER_DIST_STEP, FeatureNet, FeatureNetLoader


class CueSetError(CuebenchError):
    """The photos, the DiST release or the cue-conflict folder cannot make a cue study's stimuli."""


def read_photos(folder: str | Path) -> list[tuple[str, Path, int]]:
    """(stem, file, ImageNet index) of a photo folder: ``labels.csv`` (``image,imagenet_index``) beside
    the images, which lie in the folder itself or in ``original/`` (a DiST release)."""
    from cuebench.images import IMAGE_SUFFIXES

    root = Path(folder)
    labels = root / "labels.csv"
    if not labels.is_file():
        raise CueSetError(f"{labels} is missing: the photos need a labels.csv with columns image,imagenet_index")
    images = root / "original" if (root / "original").is_dir() else root
    files = {f.stem: f for f in images.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES}
    out = []
    with labels.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"image", "imagenet_index"} <= set(reader.fieldnames):
            raise CueSetError(f"{labels}: needs columns image,imagenet_index, has {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            stem = Path(row["image"]).stem
            try:
                index = int(row["imagenet_index"])
            except ValueError:
                index = -1
            if not 0 <= index < 1000:
                raise CueSetError(f"{labels} line {line}: imagenet_index {row['imagenet_index']!r} is not 0..999")
            if stem not in files:
                raise CueSetError(f"{labels} line {line}: no image {stem!r} in {images}")
            out.append((stem, files[stem], index))
    if len(out) < 3:
        raise CueSetError(f"{labels}: at least 3 labelled photos are needed (train, val, test), got {len(out)}")
    return sorted(out)


def split_photos(photos: list, seed: int, val: float = 0.15, test: float = 0.25) -> dict[str, list]:
    """A seeded train / val / test split within each class, so that every validation and test photo is
    of a class the n-way head trains on: of a class's k photos, round(test k) go to test (at least
    one when k >= 3), round(val k) to validation (at least one when k >= 4), the rest to training;
    a class with fewer photos trains only."""
    rng = random.Random(seed)
    by_class: dict[int, list] = {}
    for photo in sorted(photos):
        by_class.setdefault(photo[2], []).append(photo)
    splits: dict[str, list] = {"test": [], "val": [], "train": []}
    for _, members in sorted(by_class.items()):
        rng.shuffle(members)
        k = len(members)
        n_test = max(int(k >= 3), round(test * k))
        n_val = max(int(k >= 4), round(val * k))
        splits["test"] += members[:n_test]
        splits["val"] += members[n_test:n_test + n_val]
        splits["train"] += members[n_test + n_val:]
    empty = [name for name, members in splits.items() if not members]
    if empty:
        raise CueSetError(f"the photos give no {' and no '.join(empty)} photo: the split is made within each class, "
                            "and a class needs 3 photos for one test photo and 4 for a validation photo too")
    return {name: sorted(members) for name, members in splits.items()}


CUE_DESIGNS = {"dist": "dist-import", "cue_conflict": "cue-conflict-import"}
"""The design each of a cue study's experiment folders (``cuebench.studies.CUE_EXPERIMENTS``) is built with."""
SYNTHESIS_SIZE = 224
"""Default side at which the disrupted images are synthesised and quality-checked, whatever the
training size: DiST's own images are 224 x 224, and smaller ones come out as noise (docs/dist.md)."""

DISTINGUISH_A_STEPS = 10 * STEPS_PER_DIST_STEP
"""Default synthesis steps of the disrupted training images: DiSTinguish-A's 10 DiST steps (Wen et al.
2024, App. A.2), 20 synthesis steps each (``STEPS_PER_DIST_STEP``, a reading inferred from the
paper's timing); DiSTinguish-C's 100 DiST steps are 2,000."""

MIN_SHARE_INSIDE = 0.5
"""Share of the disrupted training images whose LV and HFE ratios must both lie inside DiST's 5-95 %
bands. Of DiST's own images (set1 and set2 of the release's originals 101-200, against the bands of
the first 100) 78 % lie inside both at 224 px, 81 % at 128 px, 82 % at 96 px; a set whose medians
pass while half or more of its images lie outside is not DiST's kind."""

DIST_NOISE_SCALE = 1.0
"""DiST starts the synthesis from isotropic unit Gaussian noise in the network's normalised input space."""


def load_pixels(files: list[Path], size: int) -> np.ndarray:
    """N x size x size x 3 uint8: each photo fitted to a 224 square (the project's policy), then resized."""
    from cuebench.images import decode_image

    from .sources import fit_to_stimulus

    return resize_all(np.stack([fit_to_stimulus(decode_image(f)) for f in files]), size)


def resize_all(images: np.ndarray, size: int) -> np.ndarray:
    import cv2

    if images.shape[1:3] == (size, size):
        return images
    return np.stack([cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA) for image in images]).astype(np.uint8)


def disrupt(images: np.ndarray, seed: int, steps: int, net: FeatureNet, batch: int | None = None) -> np.ndarray:
    """Structure-disrupted versions made like DiST's own: Gram texture synthesis from isotropic noise,
    ``steps`` synthesis steps (L-BFGS iterations; 200 = DiSTinguish-A, 2,000 = -C) against ``net``'s
    features."""
    from tqdm import tqdm

    from .texture_synthesis import synthesize

    batch = batch or (32 if net.device.type == "cuda" else 8)
    seeds = [seed * 100_003 + i for i in range(len(images))]
    parts = []
    for start in tqdm(range(0, len(images), batch), desc=f"disrupting ({steps} synthesis steps)", unit="batch"):
        parts.append(synthesize(images[start:start + batch], seeds[start:start + batch], net,
                                steps=steps, noise_scale=DIST_NOISE_SCALE).images)
    return np.concatenate(parts) if parts else images[:0]


def texture_ratios(originals: np.ndarray, disrupted: np.ndarray) -> np.ndarray:
    """(n, 2): each disrupted image's local variance and high-frequency energy over its original's
    (Burgert et al. 2025, App. A, Eqs. 1 and 3), *uncapped*: the capped metrics read 1 for noise and
    texture alike, while noise shows as ratios well above DiST's own."""
    from .quality import high_frequency_ratio, local_variance, to_gray

    rows = []
    for original, version in zip(originals, disrupted):
        gray, gray_hat = to_gray(original), to_gray(version)
        rows.append((local_variance(gray_hat) / max(local_variance(gray), 1e-12),
                     high_frequency_ratio(gray_hat) / max(high_frequency_ratio(gray), 1e-12)))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 2)


def dist_reference_band(release: Path, limit: int = 100, size: int = SYNTHESIS_SIZE) -> np.ndarray:
    """(2, 2): the 5th and 95th percentiles of the LV and HFE ratios of a DiST release's own disrupted
    images (``set1``, ``set2``) to their originals, over its first ``limit`` originals, at ``size``."""
    from cuebench.images import decode_image

    names = sorted(f.name for f in (release / "original").iterdir())[:limit] if (release / "original").is_dir() else []
    pairs = [(release / "original" / n, release / part / n) for n in names for part in ("set1", "set2")
             if (release / part / n).is_file()]
    if not pairs:
        raise CueSetError(f"{release} holds no original/ with set1/ or set2/ versions: nothing to check the "
                            "disrupted training images against")
    originals = resize_all(np.stack([decode_image(o) for o, _ in pairs]), size)
    versions = resize_all(np.stack([decode_image(v) for _, v in pairs]), size)
    return np.percentile(texture_ratios(originals, versions), [5, 95], axis=0).T


def check_disruption(ratios: np.ndarray, band: np.ndarray, refuse: bool = True,
                     min_share: float = MIN_SHARE_INSIDE) -> dict:
    """The quality gate at one size: the median LV and HFE ratios of the disrupted training set must lie
    where 90 % of DiST's own images lie, and at least ``min_share`` of the images must lie inside both
    bands; otherwise the 2n task could become "photo vs noise" and is refused (``refuse=False`` only
    records the numbers, ``passed`` and, if not, the ``problems``)."""
    medians = np.median(ratios, axis=0)
    inside = float(((ratios >= band[:, 0]) & (ratios <= band[:, 1])).all(axis=1).mean()) if len(ratios) else 0.0
    report = {f"{name}_ratio_median": round(float(m), 3) for name, m in zip(("LV", "HFE"), medians)}
    report.update({f"{name}_dist_band": [round(float(lo), 3), round(float(hi), 3)]
                   for name, (lo, hi) in zip(("LV", "HFE"), band)})
    report["share_inside_band"] = round(inside, 3)
    problems = [f"{name} ratio median {m:.2f} outside DiST's 5-95 % band {lo:.2f}-{hi:.2f}"
                for name, m, (lo, hi) in zip(("LV", "HFE"), medians, band) if not lo <= m <= hi]
    if inside < min_share:
        problems.append(f"{inside:.0%} of the images inside both bands, fewer than {min_share:.0%}")
    report["passed"] = not problems
    if problems:
        report["problems"] = problems
        if refuse:
            raise CueSetError("the disrupted training images do not look like DiST's (" + "; ".join(problems)
                                + "): more --synthesis-steps or another --feature-net")
    return report


def quality_gate(photos: np.ndarray, disrupted: np.ndarray, release: Path, sizes: list[int], refuse: bool) -> dict:
    """``check_disruption`` at every size in ``sizes`` (the synthesis size and the training input size:
    what the network trains on must pass too), against DiST's band at that size; one refusal naming
    each size that fails."""
    reports = {}
    for size in dict.fromkeys(sizes):
        ratios = texture_ratios(resize_all(photos, size), resize_all(disrupted, size))
        reports[str(size)] = check_disruption(ratios, dist_reference_band(release, size=size), refuse=False)
    problems = [f"at {size} px: {problem}" for size, report in reports.items() for problem in report.get("problems", [])]
    if problems and refuse:
        raise CueSetError("the disrupted training images do not look like DiST's (" + "; ".join(problems)
                            + "): more --synthesis-steps or another --feature-net")
    return {"checked": refuse, "passed": not problems, "min_share_inside_band": MIN_SHARE_INSIDE, "sizes": reports}


def subset_mapping(classes) -> tuple[dict[str, list[int]], list[str]]:
    """(label -> ImageNet indices, covered labels) with which a model over ``classes`` (ImageNet
    indices) answers 16-class trials: a category with trained classes among model-vs-human's index
    lists (Geirhos et al. 2019) scores with those classes only, as the 16class rules average or sum
    over a category's indices; a category without any keeps its list, whose classes the model never
    answers, so it scores 0 and is never chosen. Averaging over the full lists instead would divide
    each category's evidence by how many ImageNet classes it has (dog: 109, truck: 8)."""
    trained = {int(c) for c in classes}
    mapping, covered = {}, []
    for label, indices in IMAGENET16_INDICES.items():
        own = [i for i in indices if i in trained]
        mapping[label] = own or list(indices)
        if own:
            covered.append(label)
    return mapping, covered


def _link_tree(pairs: list[tuple[Path, Path]]) -> None:
    for source, link in pairs:
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.symlink(source.resolve(), link)


def dist_source(study: Path, release: Path, exclude: set[str], max_trials: int, seed: int) -> Path:
    """A DiST-release folder (links) holding the release's triplets whose original is not a training photo."""
    originals = sorted(f for f in (release / "original").iterdir() if f.stem not in exclude) \
        if (release / "original").is_dir() else []
    if not originals:
        raise CueSetError(f"{release}/original holds no image outside the training photos: no DiST test trials")
    random.Random(seed).shuffle(originals)
    chosen = sorted(originals[:max_trials])
    folder = study / "sources" / "dist"
    _link_tree([(release / part / f.name, folder / part / f.name) for f in chosen for part in ("original", "set1", "set2")])
    return folder


def cue_conflict_source(study: Path, root: Path, per_class: int, categories: list[str]) -> Path:
    """A cue-conflict folder (links) with the first ``per_class`` conflicting images of each shape class
    among ``categories`` whose texture class is another of ``categories``: the 16-class categories the
    trained classes fall into, the only answers an n-class model can give (``subset_mapping``); an
    image whose texture it cannot name would count its shape answers and never its texture answers."""
    from .designs.imported_sets import CUE_CONFLICT_NAME

    if not root.is_dir():
        raise CueSetError(f"cue-conflict folder {root} does not exist")
    folder = study / "sources" / "cue_conflict"
    pairs = []
    for shape in sorted(d for d in root.iterdir() if d.is_dir() and d.name in categories):
        conflict = [f for f in sorted(shape.iterdir()) if (m := CUE_CONFLICT_NAME.match(f.stem))
                    and m["shape"] != m["texture"] and m["texture"] in categories]
        pairs += [(f, folder / shape.name / f.name) for f in conflict[:per_class]]
    if not pairs:
        raise CueSetError(f"{root} holds no cue-conflict image <shape>N-<texture>M with shape and texture among "
                            f"the trained classes' categories ({', '.join(categories)})")
    _link_tree(pairs)
    return folder


def build_experiment(study: Path, name: str, images: Path, seed: int) -> Path:
    """``cuebench stimuli build --design <importer>`` into ``study/<name>`` (kept when it exists)."""
    from .designs import build_experiment
    from .options import BuildOptions

    expdir = ExperimentDir(study / name)
    if not expdir.experiment_file.is_file():
        build_experiment(CUE_DESIGNS[name], expdir.root, common=BuildOptions(images=str(images), seed=seed, name=name))
    return expdir.root


def prepared_study(study_dir: str | Path, input_size: int, seed: int) -> CueStudy | None:
    """The ``cue_study.json`` of a folder already prepared with ``input_size`` and ``seed``; None for a
    folder not yet prepared; a folder prepared with other values is refused (its stimuli would not match)."""
    folder = StudyDir(study_dir)
    if folder.kind != "cue":
        return None
    recorded = folder.load("cue")
    if recorded.input_size != input_size or recorded.seed != seed:
        raise CueSetError(f"{folder.file('cue')} was prepared with input size {recorded.input_size} and seed "
                          f"{recorded.seed}; use another study directory for other values")
    return recorded


def prepare_study(study_dir: str | Path, photos: str | Path, dist: str | Path, cue_conflict: str | Path, *,
                  input_size: int, seed: int, feature_net: str, load_feature_net: FeatureNetLoader, device: str,
                  synthesis_steps: int = DISTINGUISH_A_STEPS, max_photos: int | None = None,
                  max_trials: int = 100, cue_per_class: int = 10, gate: bool = True,
                  synthesis_size: int = SYNTHESIS_SIZE) -> CueStudy:
    """Write the study directory's data and experiments once; return its ``cue_study.json`` (``CueStudy``).

    The head's classes are the training photos' (``classes``: ImageNet indices, in the order of the
    head's rows). The disrupted training images, synthesised against ``feature_net`` (loaded on
    ``device`` by ``load_feature_net``), are quality-gated (``quality_gate``, at the synthesis and the
    training size ``input_size``) before anything is written; ``gate=False`` keeps them anyway,
    recording their numbers as unchecked. The cue-conflict trials are those whose shape and texture
    categories both hold trained classes; fewer than two such categories is refused, since shape bias
    needs both."""
    study = Path(study_dir)
    recorded = prepared_study(study, input_size, seed)
    if recorded is not None:
        return recorded
    if synthesis_steps < 1 or synthesis_size < 32:
        raise CueSetError(f"--synthesis-steps must be >= 1 and --synthesis-size >= 32, got {synthesis_steps} "
                          f"and {synthesis_size}")
    listed = read_photos(photos)
    if max_photos:
        listed = sorted(random.Random(seed).sample(listed, min(max_photos, len(listed))))
    splits = split_photos(listed, seed)
    classes = sorted({index for _, _, index in splits["train"]})
    mapping, covered = subset_mapping(classes)
    if len(covered) < 2:
        raise CueSetError(f"the training photos' {len(classes)} classes fall into {len(covered)} of the 16 "
                          f"cue-conflict categories ({', '.join(covered) or 'none'}): shape bias needs two, one "
                          "for the shape and one for the texture; add photos of classes of another category "
                          "(e.g. 'cuebench labels search dog')")
    arrays = {"classes": np.array(classes, dtype=np.int64)}
    for split, rows in splits.items():
        arrays[f"{split}_images"] = load_pixels([f for _, f, _ in rows], synthesis_size)
        arrays[f"{split}_labels"] = np.array([i for _, _, i in rows], dtype=np.int64)
    disrupted = disrupt(arrays["train_images"], seed, synthesis_steps, load_feature_net(feature_net, device))
    quality = quality_gate(arrays["train_images"], disrupted, Path(dist), [synthesis_size, input_size], gate)
    arrays["disrupted_images"] = resize_all(disrupted, input_size)
    for split in splits:
        arrays[f"{split}_images"] = resize_all(arrays[f"{split}_images"], input_size)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write(study / CUE_PHOTOS_FILE, buf.getvalue())
    atomic_write(study / CUE_MAPPING_FILE, json.dumps(mapping, indent=1).encode("utf-8"))
    seen = {s for split in ("train", "val") for s, _, _ in splits[split]}
    build_experiment(study, "dist", dist_source(study, Path(dist), seen, max_trials, seed), seed)
    conflict = cue_conflict_source(study, Path(cue_conflict), cue_per_class, covered)
    build_experiment(study, "cue_conflict", conflict, seed)
    record = CueStudy(photos=recorded_path(photos), dist=recorded_path(dist), cue_conflict=recorded_path(cue_conflict),
                      input_size=input_size, seed=seed, classes=classes,
                      cue_conflict_categories=covered,
                      cue_conflict_images=sum(1 for f in conflict.rglob("*") if f.is_symlink()),
                      disruption={"method": "gram", "feature_net": feature_net,
                                  "dist_steps": synthesis_steps / STEPS_PER_DIST_STEP,
                                  "lbfgs_iterations": synthesis_steps,
                                  "noise_scale": DIST_NOISE_SCALE, "size": synthesis_size, "quality": quality},
                      splits={k: [s for s, _, _ in v] for k, v in splits.items()})
    StudyDir(study).save(record)
    return record
