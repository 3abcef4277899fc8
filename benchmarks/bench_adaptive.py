"""QUEST+ blocks: cuebench.adaptive.AdaptiveRun against the questplus package's own QuestPlus, same answers, same run.

A server rebuilds a participant's block from the stored answers on every request, so what a request costs is a
replay: every answer taken, then the next level chosen. Times both for blocks of 40 answers on the 16-class
patch-shuffle grid, checks that they choose the same level at every step, and prints seconds per block and the ratio.

    OMP_NUM_THREADS=1 python benchmarks/bench_adaptive.py --blocks 5
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from cuebench.adaptive import AdaptiveRun, lapse_weights, plan_for_grid


def answers(plan, seed: int) -> list[tuple[int, bool]]:
    """A person's 40 answers (threshold 9, spread 1.5, lapse 0.02), each level chosen by QUEST+."""
    rng, run = np.random.default_rng(seed), AdaptiveRun(plan, "human")
    while not run.finished:
        level = run.next_level()
        p = 1 / 16 + (1 - 1 / 16 - 0.02) * 0.5 * math.erfc((plan.value_of(level) - 9.0) / (1.5 * math.sqrt(2)))
        run.update(level, bool(rng.random() < p))
    return run.answers


def questplus_levels(plan, block) -> list[int]:
    """questplus stepping through the block: the level it would choose before each answer."""
    from questplus import QuestPlus

    quest = QuestPlus(stim_domain={"intensity": -np.asarray(plan.values)},
                      param_domain={"mean": -np.asarray(plan.thresholds), "sd": np.asarray(plan.spreads),
                                    "lower_asymptote": np.array([plan.guess_rate]),
                                    "lapse_rate": np.asarray(plan.lapses)},
                      outcome_domain={"response": ["correct", "incorrect"]},
                      prior={"lapse_rate": lapse_weights(plan, "human")}, func="norm_cdf", stim_scale="linear")
    levels = []
    for level, correct in block:
        levels.append(plan.levels[plan.values.index(-quest.next_stim["intensity"])])
        quest.update(stim={"intensity": -plan.value_of(level)},
                     outcome={"response": "correct" if correct else "incorrect"})
    return levels


def ours_levels(plan, block) -> list[int]:
    levels, run = [], AdaptiveRun(plan, "human")
    for level, correct in block:
        levels.append(run.next_level())
        run.update(level, correct)
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=5, help="simulated 40-answer blocks")
    args = parser.parse_args()
    plan = plan_for_grid("patch_shuffle", range(15), range(2, 17), "grid", 1 / 16, 40)
    blocks = [answers(plan, seed) for seed in range(args.blocks)]
    timings, chosen = {}, {}
    for name, replay in (("questplus", questplus_levels), ("AdaptiveRun", ours_levels)):
        start = time.perf_counter()
        chosen[name] = [replay(plan, block) for block in blocks]
        timings[name] = (time.perf_counter() - start) / len(blocks)
    print(f"QUEST+ replay of a 40-answer block (16 classes, {len(plan.lapses)} lapses), {args.blocks} blocks")
    for name, seconds in timings.items():
        print(f"  {name:12s} {seconds:.3f} s per block")
    print(f"  ratio (questplus / AdaptiveRun): {timings['questplus'] / timings['AdaptiveRun']:.1f}x")
    print(f"  same level at every step: {chosen['questplus'] == chosen['AdaptiveRun']}")


if __name__ == "__main__":
    main()
