"""BiasBed's model selection (best validation, last-n epochs, oracle), variability and rank tests with the data
sets as blocks, on a per-epoch log written by hand."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.selection import SelectionError, rank_tests, select, selection_table, variability

VAL = {("erm", 0): (.5, .7, .6, .7), ("erm", 1): (.4, .5, .8, .6),
       ("sagnet", 0): (.6, .6, .5, .4), ("sagnet", 1): (.3, .4, .5, .6)}
TESTS = {  # (algorithm, run) -> split -> accuracy at epochs 1..4
    ("erm", 0): {"edges": (.2, .3, .5, .1), "silhouettes": (.4, .5, .4, .3), "cue-conflict": (.1, .1, .2, .2)},
    ("erm", 1): {"edges": (.3, .2, .4, .2), "silhouettes": (.3, .3, .6, .5), "cue-conflict": (.2, .1, .1, .3)},
    ("sagnet", 0): {"edges": (.1, .2, .2, .3), "silhouettes": (.2, .1, .3, .2), "cue-conflict": (.4, .3, .2, .2)},
    ("sagnet", 1): {"edges": (.1, .1, .2, .2), "silhouettes": (.1, .2, .2, .2), "cue-conflict": (.1, .2, .3, .5)},
}


def hand_log() -> pd.DataFrame:
    rows = []
    for (algorithm, run), val in VAL.items():
        for epoch in range(1, 5):
            rows.append({"algorithm": algorithm, "run": run, "epoch": epoch, "split": "val", "accuracy": val[epoch - 1]})
            rows += [{"algorithm": algorithm, "run": run, "epoch": epoch, "split": split, "accuracy": acc[epoch - 1]}
                     for split, acc in TESTS[(algorithm, run)].items()]
    return pd.DataFrame(rows)


@pytest.mark.validates("BiasBed model selection: best validation, last-n epochs, oracle",
                       definition="best-val: test score at the epoch of the best validation accuracy (earliest on a "
                                  "tie; among the selectable epochs where the log marks them); "
                                  "last-n: mean test score of the last n epochs; oracle: best test score over "
                                  "epochs (marked oracle)",
                       source="Kalischek et al. 2023 (BiasBed), Sec. 5 'Model selection', Tables 1-3",
                       reference="hand computation on a hand-written per-epoch log", tolerance="exact")
def test_selections_by_hand():
    log = hand_log()
    best = select(log, "best-val").set_index(["algorithm", "run", "split"])
    assert best.loc[("erm", 0, "edges"), "score"] == pytest.approx(.3)  # val .7 first at epoch 2 (tied at 4)
    assert best.loc[("erm", 0, "edges"), "epochs"] == "2"
    assert best.loc[("erm", 1, "silhouettes"), "score"] == pytest.approx(.6)  # val .8 at epoch 3
    assert best.loc[("sagnet", 0, "cue-conflict"), "score"] == pytest.approx(.4)  # val .6 first at epoch 1
    last = select(log, "last-2").set_index(["algorithm", "run", "split"])
    assert last.loc[("erm", 0, "edges"), "score"] == pytest.approx((.5 + .1) / 2)
    assert last.loc[("erm", 0, "edges"), "epochs"] == "3-4"
    oracle = select(log, "oracle").set_index(["algorithm", "run", "split"])
    assert oracle.loc[("erm", 0, "edges"), "score"] == pytest.approx(.5) and oracle["oracle"].all()
    assert not best["oracle"].any()
    table = selection_table(log, ["best-val", "oracle"]).set_index(["selection", "algorithm", "split"])
    assert table.loc[("best-val", "erm", "edges"), "mean"] == pytest.approx((.3 + .4) / 2)
    assert table.loc[("best-val", "erm", "edges"), "sd"] == pytest.approx(pd.Series([.3, .4]).std())
    assert table.loc[("oracle", "erm", "edges"), "mean"] == pytest.approx((.5 + .4) / 2)
    with pytest.raises(SelectionError, match="unknown selection"):
        select(log, "last-0")
    # a run whose protocol lets selection pick only some epochs (train-cues' selectable: InfoDrop's last ones)
    gated = log.assign(selectable=log["epoch"] >= 3)
    best = select(gated, "best-val").set_index(["algorithm", "run", "split"])
    assert best.loc[("erm", 0, "edges"), "epochs"] == "4"  # val .6, .7 at epochs 3, 4: the .7 of epoch 2 is not allowed
    assert best.loc[("sagnet", 0, "edges"), "score"] == pytest.approx(.2)  # val .5 at 3 beats .4 at 4


@pytest.mark.validates("intra-run and inter-run variability",
                       definition="intra: sd (ddof 1) over a run's last n test scores, mean over runs; inter: sd over "
                                  "runs of the selected score",
                       source="Kalischek et al. 2023 (BiasBed), Sec. 6 'Intra-run and inter-run variability', Fig. 2",
                       reference="hand computation", tolerance="exact")
def test_variability_by_hand():
    v = variability(hand_log(), last=2).set_index(["algorithm", "split"])
    intra = (pd.Series([.5, .1]).std() + pd.Series([.4, .2]).std()) / 2
    assert v.loc[("erm", "edges"), "intra_run_sd"] == pytest.approx(intra)
    assert v.loc[("erm", "edges"), "inter_run_sd"] == pytest.approx(pd.Series([.3, .4]).std())


@pytest.mark.validates("Friedman test over data sets as blocks, all and strict",
                       definition="chi2_F = 12m/(n(n+1)) [sum R_i^2 - n(n+1)^2/4] with the test sets as the m blocks "
                                  "and the algorithms as the n methods; strict leaves out the named sets",
                       source="Kalischek et al. 2023 (BiasBed), eqs. 4-5, Tables 4-5",
                       reference="hand computation: ranks (1,1,2)/(2,2,1) over 3 sets, (1,1)/(2,2) over 2",
                       tolerance="1e-9")
def test_rank_tests_with_data_sets_as_blocks_by_hand():
    table = selection_table(hand_log(), ["best-val", "oracle"])
    tests = rank_tests(table, "best-val", strict_exclude=("cue-conflict",))
    # best-val means: erm edges .35, silhouettes .55, cue-conflict .15; sagnet .15, .15, .25
    r_erm, r_sag = (1 + 1 + 2) / 3, (2 + 2 + 1) / 3
    assert tests["all"].chi2 == pytest.approx(12 * 3 / (2 * 3) * (r_erm ** 2 + r_sag ** 2 - 2 * 9 / 4))
    assert tests["strict"].chi2 == pytest.approx(12 * 2 / (2 * 3) * (1 + 4 - 2 * 9 / 4))
    assert tests["strict"].n_blocks == 2
    with pytest.raises(SelectionError, match="oracle"):
        rank_tests(table, "oracle")


def test_the_selection_command_writes_csv_latex_variability_and_rank_tests(tmp_path):
    from cuebench_app.cli import main

    hand_log().to_csv(tmp_path / "training.csv", index=False)
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.chdir(tmp_path)
        assert main(["selection", "training.csv", "--select", "best-val", "--select", "last-2", "--select", "oracle",
                     "--strict-exclude", "cue-conflict", "--out", "sel"]) == 0
    out = Path(tmp_path / "sel")
    tex = (out / "selection.tex").read_text()
    assert tex.startswith("\\begin{tabular}") and "edges oracle" in tex and "edges best-val" in tex
    assert set(pd.read_csv(out / "selection.csv")["selection"]) == {"best-val", "last-2", "oracle"}
    assert json.loads((out / "rank_tests_strict.json").read_text())["blocks"] == 2
    assert {p.suffix for p in out.glob("variability.*")} == {".png", ".svg", ".pdf", ".csv"}
