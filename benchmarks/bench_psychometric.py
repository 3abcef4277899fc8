"""Psychometric fits: psignifit with the closed-form logistic (analysis.psychometric.rising_logistic,
fitted on minus the grid) against psignifit's own "logistic" through scipy.stats, same simulated data, same run.

Simulates patch-shuffle observers (15 grid levels, 8 trials per level, as the demo's models answer),
fits each both ways, and prints seconds per fit, their ratio, and the largest difference between the
two fits' thresholds and 95 % intervals (the same function, so it is zero up to the optimiser).

    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --fits 5

With ``--coverage N`` it instead measures what the suite checks on a few observers, on N of them: the coverage and
bias of the half-way threshold's 95 % interval with a floor above chance and few trials (4 alternatives, floor
0.45, 12 trials per level), how often an observer who never falls half-way (16 alternatives, floor 0.60) gets a
closed threshold inside the grid, and (with ``--studies S``) the coverage of the QUEST+ population mean over S
simulated studies of real QUEST+ runs (6 observers, thresholds 1.5 grid units apart between observers, 40 trials).
Observers are simulated here from the documented model, without the fitting code.

    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --coverage 100 --studies 40
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


def falling(x, location, scale, floor, lapse):
    """The documented model, written out: γ + (1 − γ − λ) / (1 + e^((x − m)/s))."""
    return floor + (1 - floor - lapse) / (1 + np.exp((x - location) / scale))


def floor_coverage(observers: int) -> None:
    from analysis.psychometric import fit_curve

    grids = np.arange(2, 17, dtype=float)
    for choices, floor, trials in ((4, 0.45, 12), (16, 0.60, 16)):
        hits, errors, closed = [], [], []
        for seed in range(observers):
            rng = np.random.default_rng(10_000 + seed)
            location, scale, lapse = rng.uniform(6, 11), rng.uniform(0.8, 2.0), 0.05
            k = rng.binomial(trials, falling(grids, location, scale, floor, lapse)).astype(float)
            chance, original = 1 / choices, 1 - lapse
            row, _ = fit_curve(grids, k, np.full(len(grids), float(trials)), chance,
                               reference=(float(rng.binomial(100, original)), 100.0), seed=seed)
            relative = (chance + (original - chance) / 2 - floor) / (1 - floor - lapse)
            truth = location + scale * np.log(1 / relative - 1) if 0 < relative < 1 else np.inf
            low, point, high = (row.get(f"threshold_halfway{part}", np.nan) for part in ("_ci_low", "", "_ci_high"))
            hits.append(low <= truth <= high)
            if np.isfinite(point) and np.isfinite(truth):
                errors.append(point - truth)
            closed.append(bool(np.isfinite(low) and np.isfinite(high) and grids[0] <= point <= grids[-1]))
        print(f"{choices} alternatives, floor {floor}, {trials} trials per level, {observers} observers:")
        if np.isfinite(truth):
            print(f"  half-way threshold coverage {np.mean(hits):.3f}, bias {np.mean(errors):+.2f} grid units")
        else:
            print(f"  closed thresholds inside the grid: {sum(closed)} of {observers} (truth: never half-way)")


def population_coverage(studies: int, observers: int = 6, between_sd: float = 1.5, mean: float = 9.0) -> None:
    import pandas as pd
    from scipy.stats import norm

    from analysis.sections.adaptive import final_posteriors, population_means
    from cuebench.adaptive import AdaptiveRun, plan_for_grid

    grids, choices = list(range(2, 17)), 16
    plan = plan_for_grid("patch_shuffle", range(len(grids)), grids, "grid", 1 / choices, 40)
    hits = []
    for study in range(studies):
        rng = np.random.default_rng(20_000 + study)
        rows = []
        for person, threshold in enumerate(rng.normal(mean, between_sd, observers)):
            run = AdaptiveRun(plan, "human")
            while not run.finished:
                level = run.next_level()
                p = 1 / choices + (1 - 1 / choices - 0.02) * norm.sf((plan.value_of(level) - threshold) / 1.5)
                correct = bool(rng.random() < p)
                rows.append({"observer": f"P{person}", "observer_kind": "human", "condition": "patch_shuffle",
                             "level": level, "params": {"grid": int(plan.value_of(level))},
                             "trial_index": len(run.answers), "correct": int(correct),
                             "adaptive": run.update(level, correct).to_dict()})
        per = final_posteriors(pd.DataFrame(rows), choices)
        row = population_means(per, {"patch_shuffle": np.array(grids, dtype=float)}).iloc[0]
        hits.append(row["ci_low"] <= mean <= row["ci_high"])
    print(f"QUEST+ population mean, {studies} studies of {observers} observers (between-observer SD {between_sd}): "
          f"coverage {np.mean(hits):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=5, help="simulated observers")
    parser.add_argument("--coverage", type=int, default=0, help="observers per floor scenario (coverage, not speed)")
    parser.add_argument("--studies", type=int, default=0, help="simulated QUEST+ studies (with --coverage)")
    args = parser.parse_args()
    if args.coverage:
        floor_coverage(args.coverage)
        if args.studies:
            population_coverage(args.studies)
        return
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
