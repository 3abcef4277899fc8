"""Rank correlations of classification metrics with relative corruption robustness (Heinert et al. Tables II and
X, laid out as their Tables V and VI) in one command, from a hand-made response table: `cuebench analyze
responses.csv --metric robustness-correlations` against an independent computation with pandas and scipy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from support import cuebench_in_process as cuebench

N = 10
"""Trials per (model, condition, level) cell."""
RIGHT = {  # model -> (condition, level) -> right answers of N
    "m1": {("original", None): 10, ("shape_cue", None): 2, ("texture_cue", None): 8,
           ("contrast", 0): 10, ("contrast", 1): 6, ("contrast", 2): 2, ("uniform_noise", 0): 1, ("uniform_noise", 1): 1},
    "m2": {("original", None): 8, ("shape_cue", None): 4, ("texture_cue", None): 6,
           ("contrast", 0): 8, ("contrast", 1): 6, ("contrast", 2): 4, ("uniform_noise", 0): 8, ("uniform_noise", 1): 2},
    "m3": {("original", None): 9, ("shape_cue", None): 6, ("texture_cue", None): 5,
           ("contrast", 0): 9, ("contrast", 1): 3, ("contrast", 2): 3, ("uniform_noise", 0): 4, ("uniform_noise", 1): 3},
    "m4": {("original", None): 10, ("shape_cue", None): 7, ("texture_cue", None): 3,
           ("contrast", 0): 1, ("contrast", 1): 9, ("contrast", 2): 7, ("uniform_noise", 0): 9, ("uniform_noise", 1): 5},
}
"""Made so that both rules matter: m4's contrast level 0 (the unchanged image) would reorder contrast if counted,
and uniform noise's level 0 (a 30 %-contrast image) reorders noise if left out."""


def responses() -> pd.DataFrame:
    rows = []
    for model, cells in RIGHT.items():
        for (condition, level), right in cells.items():
            for i in range(N):
                ok = i < right
                rows.append({"observer": model, "observer_kind": "model", "trial_id": f"{condition}-{level}-{i}",
                             "condition": condition, "level": level, "category": "cat", "correct_answer": "cat",
                             "response": "cat" if ok else "dog", "correct": int(ok)})
    return pd.DataFrame(rows)


def expected() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Predictors and relative robustness per model, computed here from RIGHT (not from the project's code)."""
    acc = {m: {k: v / N for k, v in cells.items()} for m, cells in RIGHT.items()}
    q = pd.DataFrame({m: {"Q_O": a[("original", None)], "Q_S": a[("shape_cue", None)], "Q_T": a[("texture_cue", None)]}
                      for m, a in acc.items()}).T
    s, t = q["Q_S"].mean(), q["Q_T"].mean()  # Heinert et al. Eq. 3 over the model set (every model here)
    predictors = pd.DataFrame({
        "accuracy_original": q["Q_O"], "accuracy_EED": q["Q_S"], "accuracy_texture_cue": q["Q_T"],
        "S_cd": (q["Q_S"] / s) / (q["Q_S"] / s + q["Q_T"] / t), "R_cd": (q["Q_S"] + q["Q_T"]) / (2 * q["Q_O"])})
    robustness = pd.DataFrame({m: {  # contrast: levels 1, 2 (level 0 is the unchanged image); noise: levels 0, 1
        "contrast": np.mean([a[("contrast", 1)], a[("contrast", 2)]]) / a[("original", None)],
        "uniform_noise": np.mean([a[("uniform_noise", 0)], a[("uniform_noise", 1)]]) / a[("original", None)]}
        for m, a in acc.items()}).T
    robustness["Mean"] = robustness.mean(axis=1)
    return predictors, robustness


@pytest.mark.validates("rank correlation of classification metrics with relative robustness",
                       definition="Spearman's rho and Kendall's tau-b over the models of each metric (accuracy on "
                                  "originals, EED and texture cues, S_cd, R_cd) with each relative robustness column; "
                                  "level 0 left out only where it is the unchanged image",
                       source="Heinert et al. Tables II, V, VI and X", reference="scipy.stats.spearmanr and "
                       "kendalltau on accuracies and robustness computed by hand from a hand-made response table",
                       tolerance="1e-12")
def test_one_command_gives_the_rank_correlations_of_every_metric_with_relative_robustness(tmp_path):
    responses().to_csv(tmp_path / "responses.csv", index=False)
    cuebench(tmp_path, "analyze", "responses.csv", "--metric", "relative-robustness", "--out", "robustness.csv")
    cuebench(tmp_path, "analyze", "responses.csv", "--metric", "robustness-correlations", "--out", "correlations.csv")
    predictors, robustness = expected()
    reported = pd.read_csv(tmp_path / "robustness.csv").set_index("observer")
    for column in ("contrast", "uniform_noise", "Mean"):
        assert reported[column].to_numpy() == pytest.approx(robustness.loc[reported.index, column].to_numpy(),
                                                            abs=1e-12)
    table = pd.read_csv(tmp_path / "correlations.csv").set_index(["metric", "method"])
    assert set(table.index) == {(m, k) for m in predictors.columns for k in ("spearman", "kendall")}
    for metric in predictors.columns:
        for column in ("contrast", "uniform_noise", "Mean"):
            x, y = predictors[metric].to_numpy(float), robustness[column].to_numpy(float)
            assert table.loc[(metric, "spearman"), column] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
            assert table.loc[(metric, "kendall"), column] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert table.loc[(metric, "spearman"), "models"] == 4
    # the rules matter here: counting contrast's unchanged level 0, or leaving noise's 30 %-contrast level 0 out,
    # would give other ranks
    with_level_0 = [np.mean([c[("contrast", k)] for k in range(3)]) / c[("original", None)] for c in RIGHT.values()]
    without_noise_0 = [c[("uniform_noise", 1)] / c[("original", None)] for c in RIGHT.values()]
    assert stats.spearmanr(with_level_0, robustness["contrast"]).statistic < 1
    assert stats.spearmanr(without_noise_0, robustness["uniform_noise"]).statistic < 1


def test_a_rank_correlation_needs_three_models_that_differ():
    from analysis.metrics import robustness_rank_correlations

    predictors = pd.DataFrame({"observer": ["a", "b", "c", "d"], "S_cd": [0.1, 0.2, np.nan, 0.4],
                               "flat": [0.5, 0.5, 0.5, 0.5]})
    robustness = pd.DataFrame({"observer": ["a", "b", "c", "d"], "observer_kind": "model", "Mean": [0.3, 0.1, 0.2, 0.4]})
    table = robustness_rank_correlations(predictors, robustness).set_index(["metric", "method"])
    # S_cd over a, b, d: ranks 1 2 3 against 2 1 3 -> rho = 1 - 6 (1 + 1 + 0) / (3 * 8) = 0.5, tau = (2 - 1) / 3
    assert table.loc[("S_cd", "spearman"), "Mean"] == pytest.approx(0.5)
    assert table.loc[("S_cd", "kendall"), "Mean"] == pytest.approx(1 / 3)
    assert table.loc[("S_cd", "kendall"), "models"] == 3
    assert np.isnan(table.loc[("flat", "spearman"), "Mean"])  # no ranking to correlate


def test_the_corruptions_whose_level_0_is_left_out_are_those_that_leave_the_image_as_it_is(photos):
    """UNCHANGED_AT_LEVEL_0 (analysis) against the corruptions themselves (stimuli): level 0 of contrast, low and
    high pass and phase noise is the grayscale image (at most shifted in mean), uniform noise's has 30 % of its
    contrast."""
    from analysis.metrics import HEINERT_CORRUPTIONS, UNCHANGED_AT_LEVEL_0
    from stimuli.corruptions import CORRUPTIONS, corrupt

    image = photos["chelsea"]
    gray = corrupt(image, "contrast", 1.0)[..., 0].astype(float)
    for name in HEINERT_CORRUPTIONS:
        level_0 = corrupt(image, name, CORRUPTIONS[name].grid[0])[..., 0].astype(float)
        same = np.corrcoef(gray.ravel(), level_0.ravel())[0, 1] > 0.999 and abs(level_0.std() / gray.std() - 1) < 0.02
        assert same == (name in UNCHANGED_AT_LEVEL_0), name
    noise_0 = corrupt(image, "uniform_noise", 0.0)[..., 0].astype(float)
    assert noise_0.std() / gray.std() == pytest.approx(0.3, abs=0.01)
