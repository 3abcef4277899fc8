"""DiagViB-6 studies: which (target class, correlated class) combinations each split shows.

Eulig et al. (2021), Sec. 3.2-3.3 and Fig. 3. For a pair (F_i target, F_j correlated)
three classes of every factor are selected per *dataset sample*; the 3x3 matrix of
target-class x correlated-class combinations then says how often each combination
appears in training (and validation, same distribution) and which ones the test split
holds. The other four factors are drawn uniformly from their three selected classes.

- ZSO: all nine combinations, uniformly; test = the same distribution.
- ZGO: only the diagonal (class k of F_i with class k of F_j); test = the six off-diagonal.
- CGO-c: ZGO plus c off-diagonal combinations in c different rows, picked at random, so
  every target class keeps at least one unseen combination; test = the unseen ones.
- CHGO: one target class only with its diagonal partner (shortcut), the other two
  classes uniformly with the other two correlated classes (2x2 block); test = the four
  unseen combinations; the shortcut class's accuracy is what Table 2 compares with ZGO.
- FGO-f: ZGO with f % of each target class's training images on its two off-diagonal
  combinations (split evenly); test = the off-diagonal combinations.

Cells of a training design are equally frequent (Fig. 1: "all five depicted training
combinations are uniformly shown"); counts are allocated by largest remainder so every
split's co-occurrence matrix is the design, exactly up to one image of rounding.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from cuebench.studies import SplitData, load_split, save_split, split_recipe

from .diagvib import FACTORS, DiagVibError, DiagVibGenerator, FactorSpace

STUDIES = ("ZSO", "ZGO", "CGO-1", "CGO-2", "CGO-3", "CHGO", "FGO-5", "FGO-10", "FGO-20")
SPLITS = ("train", "val", "test")
DEFAULT_SIZES = {"train": 43_740, "val": 8_748, "test": 10_000}
"""Eulig et al. (2021), Sec. 3.2: "We always generate 43 740 training, 8748 validation, and 10 000 test samples"."""
N_SELECTED = 3


def derive_seed(*parts) -> int:
    """A 63-bit seed from any parts (numbers, names), stable across runs and machines."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class StudyDesign:
    """``train``: relative frequency of each (target row, correlated column) cell; ``test``: the test cells."""

    study: str
    train: np.ndarray  # (3, 3) float, sums to 1
    test: np.ndarray  # (3, 3) bool
    shortcut_class: int | None = None  # CHGO: the target class (row) that only has a shortcut


def study_design(study: str, rng: np.random.Generator) -> StudyDesign:
    """The 3x3 co-occurrence design of one study (Eulig et al. 2021, Fig. 3)."""
    eye = np.eye(N_SELECTED, dtype=bool)
    if study == "ZSO":
        return StudyDesign(study, np.full((3, 3), 1 / 9), np.ones((3, 3), bool))
    if study == "ZGO":
        return StudyDesign(study, eye / 3.0, ~eye)
    if study.startswith("CGO-"):
        c = int(study[4:])
        cells = eye.copy()
        for row in rng.choice(N_SELECTED, size=c, replace=False):
            off = [col for col in range(N_SELECTED) if col != row]
            cells[row, off[rng.integers(len(off))]] = True
        return StudyDesign(study, cells / cells.sum(), ~cells)
    if study == "CHGO":
        k = int(rng.integers(N_SELECTED))
        others = [i for i in range(N_SELECTED) if i != k]
        cells = np.zeros((3, 3), bool)
        cells[k, k] = True
        cells[np.ix_(others, others)] = True
        return StudyDesign(study, cells / cells.sum(), ~cells, shortcut_class=k)
    if study.startswith("FGO-"):
        f = int(study[4:]) / 100.0
        train = np.where(eye, (1 - f) / 3, f / 6)
        return StudyDesign(study, train, ~eye)
    raise DiagVibError(f"unknown study {study!r}; known: {', '.join(STUDIES)}")


def allocate(weights: np.ndarray, n: int) -> np.ndarray:
    """Integer counts per cell proportional to ``weights`` that sum to ``n`` (largest remainder)."""
    share = weights / weights.sum() * n
    counts = np.floor(share).astype(np.int64)
    rest = n - counts.sum()
    order = np.argsort(-(share - counts), axis=None, kind="stable")[:rest]
    counts.flat[order] += 1
    return counts


def select_classes(space: FactorSpace, seed: int, sample: int) -> dict[str, list[int]]:
    """Three classes per factor for one dataset sample, in random order (Eulig et al., Sec. 3.2:
    "we draw five random dataset samples of selected factor classes"). The order fixes the
    diagonal: selected class k of the target pairs with selected class k of the correlated factor."""
    rng = np.random.default_rng(derive_seed(seed, "select", sample))
    return {f: [int(i) for i in rng.choice(len(space.classes(f)), N_SELECTED, replace=False)] for f in FACTORS}


def split_classes(counts: np.ndarray, selected: dict[str, list[int]], target: str, correlated: str,
                  rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Per-image factor classes for a split with these cell counts, shuffled.

    Returns (classes per factor as config indices, target row 0..2 = the label, correlated column 0..2).
    """
    rows = np.repeat(np.arange(N_SELECTED), counts.sum(axis=1))
    cols = np.concatenate([np.repeat(np.arange(N_SELECTED), counts[r]) for r in range(N_SELECTED)])
    order = rng.permutation(len(rows))
    rows, cols = rows[order], cols[order]
    classes = {}
    for f in FACTORS:
        chosen = np.asarray(selected[f])
        if f == target:
            classes[f] = chosen[rows]
        elif f == correlated:
            classes[f] = chosen[cols]
        else:
            classes[f] = chosen[rng.integers(0, N_SELECTED, len(rows))]
    return classes, rows, cols


def cooccurrence(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The 3x3 count matrix of (target row, correlated column) in a split."""
    matrix = np.zeros((N_SELECTED, N_SELECTED), dtype=np.int64)
    np.add.at(matrix, (rows, cols), 1)
    return matrix


def entry_dir(study: str, target: str, correlated: str, sample: int) -> str:
    return f"data/{study}/{target}--{correlated}/sample-{sample}"


def build_studies(root: Path, studies: list[str], pairs: list[tuple[str, str]], samples: list[int],
                  sizes: dict[str, int], seed: int, generators: dict[str, DiagVibGenerator],
                  on_split: Callable[[dict, str, SplitData], None] | None = None) -> list[dict]:
    """Generate every (study, pair, sample) entry's splits under ``root``; return their descriptions.

    ``generators`` maps ``train``/``test`` to generators over MNIST's train and test digits
    (validation uses the training digits). A split whose file already holds the same
    recipe is re-read, not regenerated. ``on_split(entry, split_name, data)`` sees each split.
    """
    space = generators["train"].space
    entries = []
    jobs = [(s, t, c, k) for s in studies for (t, c) in pairs for k in samples]
    bar = tqdm(total=len(jobs) * sum(sizes.values()), desc="diagvib", unit="img")
    for study, target, correlated, sample in jobs:
        if target == correlated or target not in FACTORS or correlated not in FACTORS:
            raise DiagVibError(f"a pair needs two different factors from {', '.join(FACTORS)}; "
                               f"got target {target!r}, correlated {correlated!r}")
        selected = select_classes(space, seed, sample)
        design = study_design(study, np.random.default_rng(derive_seed(seed, "design", study, target, correlated, sample)))
        rel = entry_dir(study, target, correlated, sample)
        entry = {"study": study, "target": target, "correlated": correlated, "dataset_sample": sample,
                 "selected": {f: [space.class_names(f)[i] for i in selected[f]] for f in FACTORS},
                 "selected_index": selected, "design_train": design.train.round(6).tolist(),
                 "design_test": design.test.astype(int).tolist(), "shortcut_class": design.shortcut_class,
                 "files": {}, "cooccurrence": {}}
        for split in SPLITS:
            n = sizes[split]
            weights = design.test.astype(float) if split == "test" else design.train
            counts = allocate(weights, n)
            split_seed = derive_seed(seed, "split", study, target, correlated, sample, split)
            path = root / rel / f"{split}.npz"
            recipe = f"{split_seed}:{n}:{derive_seed(space.to_dict(), generators[_pool(split)].digits.origin)}"
            if split_recipe(path) == recipe:
                data = load_split(path, with_images=on_split is not None)
            else:
                rng = np.random.default_rng(split_seed)
                classes, rows, cols = split_classes(counts, selected, target, correlated, rng)
                images, sample_values = generators[_pool(split)].generate(classes, int(rng.integers(2**63)))
                data = SplitData(images, rows, cols, sample_values.table())
                save_split(path, data, recipe)
            entry["files"][split] = f"{rel}/{split}.npz"
            entry["cooccurrence"][split] = cooccurrence(data.label, data.column).tolist()
            if on_split is not None:
                on_split(entry, split, data)
            bar.update(n)
        entries.append(entry)
    bar.close()
    return entries


def _pool(split: str) -> str:
    return "test" if split == "test" else "train"


def all_pairs() -> list[tuple[str, str]]:
    """The 30 ordered (target, correlated) factor pairs."""
    return [(t, c) for t in FACTORS for c in FACTORS if t != c]
