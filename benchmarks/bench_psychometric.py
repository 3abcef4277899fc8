"""Psychometric fits: psignifit with the closed-form logistic (analysis.psychometric.rising_logistic,
fitted on minus the grid) against psignifit's own "logistic" through scipy.stats, same simulated data, same run.

Simulates patch-shuffle observers (15 grid levels, 8 trials per level, as the demo's models answer),
fits each both ways, and prints seconds per fit, their ratio, and the largest difference between the
two fits' thresholds and 95 % intervals (the same function, so it is zero up to the optimiser).

    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --fits 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from analysis.psychometric import psi, rising_logistic


def fit(data: np.ndarray, sigmoid) -> tuple[float, float, float]:
    import psignifit

    result = psignifit.psignifit(data, sigmoid=sigmoid, experiment_type="nAFC", experiment_choices=8,
                                 fixed_parameters={"eta": 0.0}, verbose=False)
    low, high = result.confidence_intervals["threshold"]["0.95"]
    return result.parameter_estimate["threshold"], low, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=5, help="simulated observers")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    grids = np.arange(2, 17, dtype=float)
    sets = []
    for _ in range(args.fits):
        truth = {"location": rng.uniform(5, 12), "width": rng.uniform(3, 8), "floor": 1 / 8,
                 "lapse": rng.uniform(0, 0.2)}
        sets.append(np.column_stack([-grids, rng.binomial(8, psi(grids, truth)), np.full(len(grids), 8)]))
    timings, results = {}, {}
    for name, make in (("closed form", rising_logistic), ("scipy.stats", lambda: "logistic")):
        start = time.perf_counter()
        results[name] = np.array([fit(data, make()) for data in sets])
        timings[name] = (time.perf_counter() - start) / len(sets)
    difference = np.abs(results["closed form"] - results["scipy.stats"]).max()
    print(f"psignifit fit, 15 levels x 8 trials, {args.fits} observers")
    for name, seconds in timings.items():
        print(f"  {name:12s} {seconds:.3f} s per fit")
    print(f"  ratio (scipy.stats / closed form): {timings['scipy.stats'] / timings['closed form']:.2f}x")
    print(f"  largest difference in threshold or its 95 % interval: {difference:.2e} grid units")


if __name__ == "__main__":
    main()
