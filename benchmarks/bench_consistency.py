"""Error-consistency bootstrap: multinomial outcome counts (analysis.consistency.bootstrap_kappa) against
resampling trial indices (the textbook bootstrap), same pairs, same number of resamples, same run. The report
draws these resamples once per pair and condition x level cell (analysis.consistency.pair_kappas); the
published cue-conflict data are one cell, so a pair's trials here are that cell's.

Uses the published cue-conflict responses (13 observers, 78 pairs, about 1,270 shared trials each)
when ../shared is there, else random observers of the same size. Prints seconds per pair of both,
their ratio, and the largest difference between the two methods' 95 % interval ends (both are
bootstraps of the same distribution, so it shrinks with more resamples).

    OMP_NUM_THREADS=1 python benchmarks/bench_consistency.py --n-boot 1000
"""

from __future__ import annotations

import argparse
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.consistency import bootstrap_kappa, correctness_matrix, kappa_from_correct


def matrix_of_published_or_random(shared: Path) -> pd.DataFrame:
    folder = shared / "data/geirhos2019/raw-data/cue-conflict"
    if folder.is_dir():
        from analysis.exclusions import apply_exclusions
        from analysis.load import load_responses

        return correctness_matrix(apply_exclusions(load_responses(folder)).scored)
    rng = np.random.default_rng(0)
    return pd.DataFrame(rng.random((1280, 13)) < 0.7, columns=[f"o{i}" for i in range(13)]).astype(float)


def index_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    return kappa_from_correct(a[idx], b[idx])[2]


def run(matrix: pd.DataFrame, method, n_boot: int) -> tuple[float, list]:
    rng = np.random.default_rng(0)
    intervals = []
    start = time.perf_counter()
    for a, b in combinations(matrix.columns, 2):
        both = matrix[[a, b]].dropna()
        boot = method(both[a].to_numpy(), both[b].to_numpy(), n_boot, rng)
        intervals.append(np.nanpercentile(boot, [2.5, 97.5]))
    return time.perf_counter() - start, intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args()
    matrix = matrix_of_published_or_random(args.shared)
    pairs = len(list(combinations(matrix.columns, 2)))
    ours, ours_ci = run(matrix, bootstrap_kappa, args.n_boot)
    base, base_ci = run(matrix, index_bootstrap, args.n_boot)
    gap = max(float(np.max(np.abs(x - y))) for x, y in zip(ours_ci, base_ci))
    print(f"pairs {pairs}, trials per pair ~{len(matrix)}, resamples {args.n_boot}")
    print(f"multinomial counts: {ours / pairs * 1000:.2f} ms/pair; index resampling: {base / pairs * 1000:.2f} ms/pair")
    print(f"speed-up (index / multinomial): {base / ours:.1f}x; largest CI-end difference {gap:.4f}")


if __name__ == "__main__":
    main()
