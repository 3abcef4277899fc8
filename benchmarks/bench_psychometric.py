"""Psychometric fits: psignifit with the closed-form logistic (analysis.psychometric.rising_logistic,
fitted on minus the grid) against psignifit's own "logistic" through scipy.stats, same simulated data, same run.

Simulates patch-shuffle observers (15 grid levels, 8 trials per level, as the demo's models answer),
fits each both ways, and prints seconds per fit, their ratio, and the largest difference between the
two fits' thresholds and 95 % intervals (the same function, so it is zero up to the optimiser).

    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --fits 5

With ``--coverage N`` it instead prints the coverage-by-design table of docs/adaptive.md: for each design of
:data:`FIT_DESIGNS` (levels, trials per level, alternatives, floor, lapse, where on the grid the fall lies) the share
of N observers whose true half-way threshold lies in the reported 95 % interval, the bias of the identified thresholds
and how many were identified.
With ``--studies S`` it prints the QUEST+ population-mean table: per design of :data:`QUEST_DESIGNS` (C = 3 and 16,
20-40 trials, between-observer SD 0-1.5, means in the middle and near the ends of the grid, people's lapses) the
coverage of the population mean's 95 % interval over S studies of 8 people (a study without a closed or open interval
counts as a miss), the bias of the identified means with its Monte Carlo SE, how many studies had an identified mean
and the share of people labelled censored; every level chosen by QUEST+ and pooled as the report pools. Observers are simulated here from the documented model, without the fitting
code.

    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --coverage 120
    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --studies 100
    OMP_NUM_THREADS=1 python benchmarks/bench_psychometric.py --studies 100 --designs 0,3,6,24,25,26,27 \
        --people-lapse-prior 1,10

The last compares another people's lapse prior on the designs most sensitive to it (its table's seeds are the full
table's, design by design).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from analysis.psychometric import psi, rising_logistic
from cuebench.trials import PEOPLE_LAPSE_PRIOR


def fit(data: np.ndarray, sigmoid) -> tuple[float, float, float]:
    import psignifit

    result = psignifit.psignifit(data, sigmoid=sigmoid, experiment_type="nAFC", experiment_choices=8,
                                 fixed_parameters={"eta": 0.0}, verbose=False)
    low, high = result.confidence_intervals["threshold"]["0.95"]
    return result.parameter_estimate["threshold"], low, high


def falling(x, location, scale, floor, lapse):
    """The documented model, written out: γ + (1 − γ − λ) / (1 + e^((x − m)/s))."""
    return floor + (1 - floor - lapse) / (1 + np.exp((x - location) / scale))


# (levels, trials per level, alternatives C, floor (None: chance), lapse, where the logistic's location lies): the
# short grids people run, with a floor above chance and at it, beside the 15-level grid the suite's coverage test uses
FIT_DESIGNS = [(7, 12, 4, 0.45, 0.05, "middle"), (7, 12, 4, 0.45, 0.05, "late"), (7, 12, 4, 0.45, 0.05, "anywhere"),
               (7, 12, 4, 0.45, 0.10, "middle"), (7, 12, 4, None, 0.05, "middle"), (7, 30, 4, 0.45, 0.05, "middle"),
               (15, 12, 4, 0.45, 0.05, "middle"), (15, 20, 16, None, 0.05, "middle")]
PLACEMENTS = {"middle": (1.5 / 7, 4.5 / 7), "late": (0.5, 0.9), "anywhere": (0.0, 1.0)}
"""The logistic's location as a share of the grid's span from its first level: the 2nd-5th sevenths, its second
half up to the last tenth, or anywhere on it (the fall may then lie before the first level, where accuracy is flat)."""
ORIGINALS = 24


def fit_coverage(observers: int) -> None:
    """Coverage and bias of ``threshold_halfway`` per design (:data:`FIT_DESIGNS`), as a Markdown table. Each observer's
    logistic falls from 1 − λ, its location uniform over the design's share of the grid (:data:`PLACEMENTS`), scale
    0.5-1.2 level steps; accuracy on the originals 1 − λ, measured on :data:`ORIGINALS` trials. Coverage counts
    every row, identified or not ([low, high] as reported, high may be inf; a row without an interval counts as a
    miss); bias is over identified thresholds."""
    from analysis.psychometric import fit_curve

    print("| levels | trials per level | C | floor | lapse | location | observers | coverage | bias (grid units) | "
          "identified |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for levels, trials, choices, floor, lapse, placement in FIT_DESIGNS:
        grid, chance = np.arange(1, levels + 1, dtype=float), 1 / choices
        floor_value = chance if floor is None else floor
        share = PLACEMENTS[placement]
        hits, errors, identified = [], [], 0
        for seed in range(observers):
            rng = np.random.default_rng(10_000 + seed)
            span = levels - 1
            location, scale = 1 + span * rng.uniform(*share), rng.uniform(0.5, 1.2)
            k = rng.binomial(trials, falling(grid, location, scale, floor_value, lapse)).astype(float)
            original = 1 - lapse
            row, _ = fit_curve(grid, k, np.full(levels, float(trials)), chance,
                               reference=(float(rng.binomial(ORIGINALS, original)), float(ORIGINALS)), seed=seed)
            relative = (chance + (original - chance) / 2 - floor_value) / (1 - floor_value - lapse)
            truth = location + scale * np.log(1 / relative - 1) if 0 < relative < 1 else np.inf
            low, point, high = (row.get(f"threshold_halfway{part}", np.nan) for part in ("_ci_low", "", "_ci_high"))
            hits.append(low <= truth <= high)
            if np.isfinite(point):
                identified += 1
                errors.append(point - truth)
        floor_text = "chance" if floor is None else f"{floor:g}"
        bias = f"{np.mean(errors):+.2f}" if errors else "–"
        print(f"| {levels} | {trials} | {choices} | {floor_text} | {lapse:g} | {placement} | {observers} | "
              f"{np.mean(hits):.2f} | {bias} | {identified}/{observers} |", flush=True)


# (alternatives C, trials, population mean, between-observer SD, people's lapses up to): means in the middle of the
# 2-16 grid and two units inside its ends; the last rows: people who lapse more than the prior expects
QUEST_DESIGNS = [(c, trials, mean, sd, 0.05) for c in (3, 16) for trials in (20, 40) for sd in (0.0, 1.5)
                 for mean in (4.0, 9.0, 14.0)] + [(3, 30, 9.0, 1.0, 0.10), (16, 30, 9.0, 1.0, 0.10),
                                                  (3, 30, 9.0, 1.0, 0.20), (16, 30, 9.0, 1.0, 0.20)]


def person_correct(value, threshold, spread, lapse, choices):
    """The documented model, written out: γ + (1 − γ − λ)(1 − Φ((x − t)/s)), 1 − Φ(z) = erfc(z/√2)/2."""
    return 1 / choices + (1 - 1 / choices - lapse) * 0.5 * math.erfc((value - threshold) / (spread * math.sqrt(2)))


def population_coverage(studies: int, observers: int = 8, designs: list[int] | None = None,
                        people_lapse_prior: tuple[float, float] | None = PEOPLE_LAPSE_PRIOR) -> None:
    """Coverage of the QUEST+ population mean's 95 % interval and its bias, per design (:data:`QUEST_DESIGNS`, or the
    positions ``designs`` in it, each with its own seeds), over ``studies`` simulated studies run end to end
    (AdaptiveRun picks every level under the plan's ``people_lapse_prior``; the report's final_posteriors and
    population_means pool), as a Markdown table. People: spread uniform 0.8-2.0 grid units, lapse uniform from 0."""
    import pandas as pd

    from analysis.sections.adaptive import final_posteriors, population_means
    from cuebench.adaptive import AdaptiveRun, plan_for_grid

    grids = list(range(2, 17))
    print(f"people's lapse prior: {'flat' if people_lapse_prior is None else 'Beta(%g, %g)' % people_lapse_prior}\n")
    print("| C | trials | population mean | between-observer SD | lapses | studies | coverage | bias (grid units) | "
          "bias MC SE | identified | censored share |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for number in range(len(QUEST_DESIGNS)) if designs is None else designs:
        choices, trials, mean, between_sd, lapse_high = QUEST_DESIGNS[number]
        plan = plan_for_grid("patch_shuffle", range(len(grids)), grids, "grid", 1 / choices, trials,
                             people_lapse_prior=people_lapse_prior)
        hits, errors, censored = [], [], 0
        for study in range(studies):
            rng = np.random.default_rng(20_000 + 1000 * number + study)
            rows, truths = [], rng.normal(mean, between_sd, observers)
            for person, threshold in enumerate(truths):
                spread, lapse = rng.uniform(0.8, 2.0), rng.uniform(0, lapse_high)
                run = AdaptiveRun(plan, "human")
                while not run.finished:
                    level = run.next_level()
                    correct = bool(rng.random() < person_correct(plan.value_of(level), threshold, spread, lapse,
                                                                 choices))
                    rows.append({"observer": f"P{person}", "observer_kind": "human", "condition": "patch_shuffle",
                                 "level": level, "params": {"grid": int(plan.value_of(level))},
                                 "trial_index": len(run.answers), "correct": int(correct),
                                 "adaptive": run.update(level, correct).to_dict()})
            plans = {"patch_shuffle": plan.to_dict()}
            per, likelihoods = final_posteriors(pd.DataFrame(rows), choices, plans)
            population = population_means(per, likelihoods, plans)
            censored += int(per["label"].str.contains("censored").sum())
            if population.empty:  # fewer than two people located in the grid: no interval, a miss
                hits.append(False)
                continue
            row = population.iloc[0]
            hits.append(row["ci_low"] <= mean <= row["ci_high"])
            if np.isfinite(row["quest_threshold"]):
                errors.append(row["quest_threshold"] - truths.mean())
        print(f"| {choices} | {trials} | {mean:g} | {between_sd:g} | 0-{lapse_high:g} | {studies} | "
              f"{np.mean(hits):.2f} | {np.mean(errors):+.2f} | {np.std(errors, ddof=1) / math.sqrt(len(errors)):.2f} | "
              f"{len(errors)}/{studies} | {censored / (studies * observers):.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=5, help="simulated observers")
    parser.add_argument("--coverage", type=int, default=0,
                        help="observers per design: the coverage-by-design table of the fits (coverage, not speed)")
    parser.add_argument("--studies", type=int, default=0,
                        help="simulated studies per design: the QUEST+ population-mean table")
    parser.add_argument("--designs", type=lambda text: [int(v) for v in text.split(",")], default=None,
                        help="with --studies: only these positions of QUEST_DESIGNS (0-based, comma-separated)")
    parser.add_argument("--people-lapse-prior", type=lambda text: tuple(float(v) for v in text.split(",")),
                        default=PEOPLE_LAPSE_PRIOR, help="with --studies: the people's Beta(a, b) lapse prior as a,b")
    args = parser.parse_args()
    if args.coverage or args.studies:
        if args.coverage:
            fit_coverage(args.coverage)
        if args.studies:
            population_coverage(args.studies, designs=args.designs, people_lapse_prior=args.people_lapse_prior)
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
