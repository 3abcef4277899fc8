"""``cuebench domain-report`` on hand-built answers: runs and sets whose originals are at or below chance have
no value on the chance-0 / original-1 scale, and the report counts what entered each mean, names what was left
out and why, and draws the spread over sets. Expected values are computed here by hand from the scripted
answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row

from support import cuebench_in_process as cuebench

SETS = {"two-a": {"round": ("chelsea", "coffee", "flower"), "tall": ("rocket", "astronaut", "camera")},
        "three": {"p": ("chelsea", "rocket"), "q": ("coffee", "motorcycle"), "r": ("china", "flower")},
        "two-d": {"round": ("chelsea", "coffee", "flower"), "tall": ("rocket", "astronaut", "camera")}}
# set -> run -> (right answers of 6 on the originals, right answers of 6 at grayscale levels 0..4)
HAND = {"two-a": {"run1": (6, (6, 5, 4, 3, 3)), "run2": (3, (3, 3, 3, 3, 3))},  # run2 at chance 1/2
        "three": {"run1": (5, (5, 4, 3, 2, 2)), "run2": (6, (4, 4, 4, 2, 1))},
        "two-d": {"run1": (3, (2, 2, 2, 2, 2)), "run2": (2, (1, 1, 1, 1, 1))}}  # both at or below chance
C = {"two-a": 2, "three": 3, "two-d": 2}


def answer_by_hand(expdir: ExperimentDir, runs: dict) -> None:
    """Runs ``hand:<run>`` (one model architecture) answer the first k test images of each arm right."""
    exp = expdir.load()
    rows = []
    for run, (right_originals, right_levels) in runs.items():
        seen = {}
        for index, trial in enumerate(t for t in exp.trials if t.role == "test"):
            arm = (trial.condition, trial.level)
            k = seen[arm] = seen.get(arm, 0) + 1
            right = right_originals if trial.condition == "original" else right_levels[trial.level]
            wrong = next(c for c in trial.choices if c != trial.correct)
            rows.append(trial_row(exp, trial, observer=f"hand:{run}", observer_kind="model", session=1,
                                  trial_index=index, response=trial.correct if k <= right else wrong))
    with ResponseStore(expdir.responses_file) as store:
        store.write_many(rows)


@pytest.fixture(scope="module")
def report(photos, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("domain")
    for name, classes in SETS.items():
        for cls, names in classes.items():
            (root / "sets" / name / cls).mkdir(parents=True)
            for photo in names:
                Image.fromarray(photos[photo]).resize((32, 32)).save(root / "sets" / name / cls / f"{photo}.png")
        cuebench(root, "stimuli", "build", "--design", "suppression", "--images", f"sets/{name}", "--conditions",
                 "grayscale", "--attention", "0", "--workers", "1", "--name", name, "--out", f"exp/{name}")
        answer_by_hand(ExperimentDir(root / "exp" / name), HAND[name])
    out = cuebench(root, "domain-report", *(f"exp/{name}" for name in SETS), "--out", "report")
    (root / "report" / "printed.txt").write_text(out)
    return root / "report"


def by_hand(name: str, run: str, level: int) -> tuple[float, float]:
    """(relative, chance-corrected) of one run at one level; NaN where the scale is not defined."""
    originals, right = HAND[name][run]
    a_orig, a_sup, chance = originals / 6, right[level] / 6, 1 / C[name]
    return a_sup / a_orig, (a_sup - chance) / (a_orig - chance) if a_orig > chance else np.nan


@pytest.mark.validates("counts and spread of a domain's reliance",
                       definition="each mean over the runs / sets that have a value (originals above chance on the "
                                  "chance-0 / original-1 scale), n_runs_<value> / n_sets_<value> counting them, "
                                  "left_out naming the others; sd over the sets with a value",
                       source="Burgert et al. 2025, Sec. 5.2 (rescaling), Fig. 5 (domain means, 1-sigma bars)",
                       reference="hand computation for scripted runs on three sets, one run and one set at or "
                                 "below chance", tolerance="1e-9")
def test_domain_report_counts_what_enters_each_mean_and_names_what_was_left_out(report):
    per_set = pd.read_csv(report / "domain_reliance_per_set.csv", keep_default_na=False, na_values=[""])
    domain = pd.read_csv(report / "domain_reliance.csv", keep_default_na=False, na_values=[""]).set_index("level")
    per_set = per_set.set_index(["data_set", "level"])
    for level in range(5):
        sets_cc, sets_rel = [], []
        for name in SETS:
            values = [by_hand(name, run, level) for run in HAND[name]]
            rel = [r for r, _ in values]
            cc = [c for _, c in values if not np.isnan(c)]
            row = per_set.loc[(name, level)]
            assert row["relative_accuracy"] == pytest.approx(np.mean(rel))
            assert row["n_runs"] == 2 and row["n_runs_relative_accuracy"] == 2
            assert row["n_runs_chance_corrected"] == len(cc)
            if cc:
                assert row["chance_corrected"] == pytest.approx(np.mean(cc))
                sets_cc.append(np.mean(cc))
            else:
                assert np.isnan(row["chance_corrected"])
            sets_rel.append(np.mean(rel))
        row = domain.loc[level]
        assert row["n_sets"] == 3 and row["n_sets_relative_accuracy"] == 3 and row["n_sets_chance_corrected"] == 2
        assert row["chance_corrected"] == pytest.approx(np.mean(sets_cc))
        assert row["sd_sets_chance_corrected"] == pytest.approx(np.std(sets_cc, ddof=1))
        assert row["relative_accuracy"] == pytest.approx(np.mean(sets_rel))
        assert row["sd_sets_relative_accuracy"] == pytest.approx(np.std(sets_rel, ddof=1))
    # two-a: run2's originals sit at chance 1/2 (3 of 6), so its value comes from run1 alone
    assert per_set.loc[("two-a", 0), "left_out"].startswith("hand:run2: baseline accuracy at or below chance")
    assert pd.isna(per_set.loc[("three", 0), "left_out"])
    note = domain.loc[0, "left_out"]
    assert "two-a (relative_accuracy from 2 of 2 runs, chance_corrected from 1 of 2 runs; hand:run2:" in note
    assert "two-d (relative_accuracy from 2 of 2 runs, chance_corrected from 0 of 2 runs; hand:run1:" in note
    assert "three" not in note
    printed = (report / "printed.txt").read_text()
    assert f"note: left out of the mean: hand, grayscale, level(s) 0, 1, 2, 3, 4: {note}" in printed


def test_domain_figure_counts_the_sets_of_the_value_it_draws_and_their_spread(report):
    import matplotlib

    matplotlib.use("Agg")
    from analysis.domains import domain_curves

    domain = pd.read_csv(report / "domain_reliance.csv")
    fig = domain_curves(domain)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["hand (2 sets)"]
    (bars,) = [c for c in ax.containers if c.has_yerr]
    segments = bars.lines[2][0].get_segments()  # one vertical bar per level: mean +- sd over the sets
    spans = sorted((float(s[0][0]), float(s[1][1] - s[0][1])) for s in segments)
    expected = domain.sort_values("level")
    assert [x for x, _ in spans] == list(expected["level"])
    assert [h for _, h in spans] == pytest.approx(list(2 * expected["sd_sets_chance_corrected"]))
    assert (report / "domain_reliance.png").is_file()
