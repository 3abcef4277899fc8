"""``cuebench plan`` calibration: does the planned N achieve the power asked for, on average over pilots?

A known population (written here with numpy and scipy only, none of the project's code): I images in one
condition x level, the model right on each with probability 0.6, people whose logit of answering image i right is
``beta + b_i + a_j`` (item SD ``--item-sd``, person SD ``--person-sd``), beta set so that the people's accuracy
on these images is the model's + ``--effect``. Two designs: everyone sees every image (``--groups 1``), or a
Latin square of G groups in which person j (in group j mod G, assigned in turn as the server does) sees the images
i with i mod G = j mod G. For each pilot size, pilots are drawn from the population, planned with
``analysis.plan.plan`` (the code under test), and the planned N is then tested the way the report tests it
(item-paired two-sided t-test at alpha over the images someone answered) on fresh studies of N people from the
same population. Prints the mean achieved power per pilot size against the nominal power (asked: >= 0.78 on
average for 0.80, pilots of 3, 5 and 10 people, both designs).

    OMP_NUM_THREADS=1 python benchmarks/bench_plan.py --pilots 40 [--groups 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import optimize, stats
from scipy.special import expit


def population(rng, items: int, item_sd: float, person_sd: float, effect: float, model_accuracy: float = 0.6):
    """(model's answers, people's item logits): beta solved (scipy's brentq) so that the people's mean accuracy over
    these images, averaged over 4,000 simulated people, is the model's accuracy + effect."""
    model = (rng.random(items) < model_accuracy).astype(float)
    offsets = rng.normal(0, item_sd, items)
    people = rng.normal(0, person_sd, 4000)
    target = model.mean() + effect
    beta = optimize.brentq(lambda b: expit(b + offsets[None, :] + people[:, None]).mean() - target, -15, 15,
                           xtol=1e-6)
    return model, beta + offsets


def answers(rng, logits: np.ndarray, people: int, person_sd: float, groups: int = 1) -> np.ndarray:
    """people x items right (1) or wrong (0), each person with an ability of their own; NaN where a person's group
    does not see the image (person j and image i meet where j mod groups = i mod groups)."""
    ability = rng.normal(0, person_sd, people)
    right = (rng.random((people, len(logits))) < expit(logits[None, :] + ability[:, None])).astype(float)
    seen = np.arange(people)[:, None] % groups == np.arange(len(logits))[None, :] % groups
    return np.where(seen, right, np.nan)


def pilot_table(model: np.ndarray, correct: np.ndarray) -> pd.DataFrame:
    """The pilot as scored response rows (people and the model on the same images)."""
    rows = [{"observer": f"p{j}", "observer_kind": "human", "trial_id": f"img{i}", "correct": int(c)}
            for j, person in enumerate(correct) for i, c in enumerate(person) if not np.isnan(c)]
    rows += [{"observer": "model", "observer_kind": "model", "trial_id": f"img{i}", "correct": int(c)}
             for i, c in enumerate(model)]
    return pd.DataFrame(rows).assign(condition="blur", level=2, session="1", adaptive=None)


def achieved_power(rng, model, logits, people: int, person_sd: float, alpha: float, studies: int,
                   groups: int = 1) -> float:
    """Fraction of studies of ``people`` whose item-paired two-sided t-test (people's mean per image - model's, over
    the images someone answered) rejects at ``alpha``."""
    rejected = 0
    for start in range(0, studies, 50):
        batch = [answers(rng, logits, people, person_sd, groups) for _ in range(min(50, studies - start))]
        right = np.stack(batch)  # studies x people x items
        answered = ~np.isnan(right).all(axis=(0, 1))
        difference = np.nanmean(right[:, :, answered], axis=1) - model[answered]
        rejected += int(np.sum(stats.ttest_1samp(difference, 0.0, axis=1).pvalue < alpha))
    return rejected / studies


def calibration(pilot_sizes=(3, 5, 10), pilots: int = 10, items: int = 100, item_sd: float = 1.0,
                person_sd: float = 0.8, effect: float = 0.15, power: float = 0.8, alpha: float = 0.05,
                simulations: int = 300, studies: int = 300, seed: int = 0, groups: int = 1,
                verbose: bool = False) -> dict[int, list[float]]:
    """Pilot size -> the achieved power of each pilot's plan (module docstring)."""
    from analysis.plan import plan

    rng = np.random.default_rng(seed)
    out: dict[int, list[float]] = {}
    for size in pilot_sizes:
        out[size] = []
        for index in range(pilots):
            model, logits = population(rng, items, item_sd, person_sd, effect)
            planned = plan(pilot_table(model, answers(rng, logits, size, person_sd, groups)), effect, power, alpha,
                           sims=simulations, seed=index)
            out[size].append(achieved_power(rng, model, logits, planned.n, person_sd, alpha, studies, groups)
                             if planned.n else 0.0)
            if verbose:
                print(f"  pilot {index} of {size} people: planned n {planned.n}, achieved power {out[size][-1]:.3f}",
                      flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=40)
    parser.add_argument("--simulations", type=int, default=1000, help="the plan's simulated studies per n")
    parser.add_argument("--studies", type=int, default=1000, help="studies testing each planned n")
    parser.add_argument("--item-sd", type=float, default=1.0)
    parser.add_argument("--person-sd", type=float, default=0.8)
    parser.add_argument("--effect", type=float, default=0.15)
    parser.add_argument("--groups", type=int, default=1, help="Latin-square groups (1: everyone sees everything)")
    args = parser.parse_args()
    start = time.perf_counter()
    result = calibration(pilots=args.pilots, simulations=args.simulations, studies=args.studies,
                         item_sd=args.item_sd, person_sd=args.person_sd, effect=args.effect, groups=args.groups,
                         verbose=True)
    for size, powers in result.items():
        mean, se = np.mean(powers), np.std(powers, ddof=1) / np.sqrt(len(powers))
        print(f"pilot of {size:2d} people, {args.groups} group(s): mean achieved power {mean:.3f} (SE {se:.3f}, "
              f"{len(powers)} pilots; nominal 0.800, {'at least' if mean >= 0.78 else 'NOT at least'} 0.78)")
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
