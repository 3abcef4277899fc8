"""Factor-study metrics against hand-computed values (Eulig et al. 2021, Sec. 3.4 and Table 2; BiasBed)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.factor_studies import (FactorStudyError, chgo_improvement, factor_aggregates, load_training_table,
                                     p_matrix, rank_methods, select_epochs, write_study_report)


def row(study, target, correlated, sample, run, epoch, split, accuracy, per_class=None, shortcut=-1,
        model="resnet18", algorithm="erm"):
    return {"study": study, "target": target, "correlated": correlated, "pair": f"{target}-{correlated}",
            "dataset_sample": sample, "shortcut_class": shortcut, "model": model, "algorithm": algorithm, "run": run,
            "seed": run, "epoch": epoch, "split": split, "accuracy": accuracy,
            "per_class_accuracy": json.dumps(per_class or [accuracy] * 3), "n_images": 30, "train_loss": 0.5,
            "train_images_per_s": 100.0, "job_id": f"{study}-{target}-{correlated}-{sample}-{run}"}


def single_epoch(study, target, correlated, sample, run, accuracy, **kw):
    return [row(study, target, correlated, sample, run, 1, "val", 0.9, **kw),
            row(study, target, correlated, sample, run, 1, "test", accuracy, **kw)]


def write_table(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path / "training.csv", index=False)
    return load_training_table(path)


def test_model_selection_best_val_last_n_and_flagged_oracle(tmp_path):
    rows = []
    for epoch, val, test in ((1, 0.5, 0.4), (2, 0.9, 0.6), (3, 0.7, 0.8)):
        rows += [row("ZGO", "hue", "shape", 0, 0, epoch, "val", val), row("ZGO", "hue", "shape", 0, 0, epoch, "test", test)]
    table = write_table(tmp_path, rows)
    best = select_epochs(table, "best_val")
    assert best["accuracy"].item() == pytest.approx(0.6) and best["epoch"].item() == 2 and not best["oracle"].item()
    assert select_epochs(table, "last_n", last_n=2)["accuracy"].item() == pytest.approx(0.7)
    oracle = select_epochs(table, "oracle")
    assert oracle["accuracy"].item() == pytest.approx(0.8) and oracle["oracle"].item()
    with pytest.raises(FactorStudyError, match="unknown model selection"):
        select_epochs(table, "best_train")
    tests_only = write_table(tmp_path / "no-val", [r for r in rows if r["split"] == "test"])
    with pytest.raises(FactorStudyError, match=r"run \('ZGO'.* has no validation rows"):
        select_epochs(tests_only, "best_val")
    assert select_epochs(tests_only, "last_n", last_n=2)["accuracy"].item() == pytest.approx(0.7)


def zgo_zso_rows():
    rows = []
    for sample, shape_runs, position_runs in ((0, (0.2, 0.4), (0.8, 0.8)), (1, (0.5, 0.5), (0.6, 0.6))):
        for run in (0, 1):
            rows += single_epoch("ZGO", "hue", "shape", sample, run, shape_runs[run])
            rows += single_epoch("ZGO", "hue", "position", sample, run, position_runs[run])
    for sample, shape_acc, position_acc in ((0, 0.9, 1.0), (1, 1.0, 1.0)):
        rows += single_epoch("ZSO", "hue", "shape", sample, 0, shape_acc)
        rows += single_epoch("ZSO", "hue", "position", sample, 0, position_acc)
    return rows


@pytest.mark.validates(
    'DiagViB-6 P_ij, FAAvg and FAMin with standard errors',
    definition='P_ij = accuracy on factor i with j correlated; FAAvg = mean_j P_ij, FAMin = min_j P_ij, averaged over samples',
    source='Eulig et al. 2021, Sec. 3.4',
    reference='hand computation',
    tolerance='exact (pytest.approx)')
def test_p_ij_faavg_famin_with_standard_errors(tmp_path):
    selected = select_epochs(write_table(tmp_path, zgo_zso_rows()))
    p = p_matrix(selected).set_index(["study", "target", "correlated"])
    # acc_ij per sample (runs averaged): hue-shape 0.3, 0.5; hue-position 0.8, 0.6
    assert p.loc[("ZGO", "hue", "shape"), "P"] == pytest.approx(0.4)
    assert p.loc[("ZGO", "hue", "shape"), "se"] == pytest.approx(0.1)  # sd 0.1414 / sqrt(2)
    assert p.loc[("ZGO", "hue", "position"), "P"] == pytest.approx(0.7)
    agg = factor_aggregates(selected).set_index(["study", "target"])
    assert agg.loc[("ZGO", "hue"), "FAAvg"] == pytest.approx(0.55)  # per sample 0.55 and 0.55
    assert agg.loc[("ZGO", "hue"), "FAAvg_se"] == pytest.approx(0.0)
    assert agg.loc[("ZGO", "hue"), "FAMin"] == pytest.approx(0.4)  # per sample 0.3 and 0.5
    assert agg.loc[("ZGO", "hue"), "FAMin_se"] == pytest.approx(0.1)
    # ZSO: FAAvg = FAMin = P_i (Eulig et al., Sec. 3.4); per sample 0.95 and 1.0
    assert agg.loc[("ZSO", "hue"), "FAAvg"] == pytest.approx(0.975) == agg.loc[("ZSO", "hue"), "FAMin"]


def test_chgo_minus_zgo_table_2_layout(tmp_path):
    rows = zgo_zso_rows()
    rows += single_epoch("CHGO", "hue", "shape", 0, 0, 0.633, per_class=[0.9, 0.2, 0.8], shortcut=1)
    rows += single_epoch("CHGO", "hue", "shape", 1, 0, 0.833, per_class=[0.7, 0.9, 0.9], shortcut=0)
    table = chgo_improvement(select_epochs(write_table(tmp_path, rows)))
    # shortcut class: 0.2 - 0.3 = -10 points, 0.7 - 0.5 = +20 points -> mean 5, sd 21.2
    assert table.to_dict("records") == [{"method": "resnet18/erm", "hue": "5 ± 21"}]
    with pytest.raises(FactorStudyError, match="CHGO and ZGO"):
        chgo_improvement(select_epochs(write_table(tmp_path / "zgo-only", zgo_zso_rows())))


def test_friedman_over_study_factor_blocks_hand_computed():
    ranks = {"A": [1, 1, 1, 2], "B": [2, 2, 2, 1], "C": [3, 3, 3, 3]}
    blocks = [("ZGO", "hue"), ("ZGO", "shape"), ("CGO-1", "hue"), ("CGO-1", "shape")]
    rows = [{"study": s, "target": t, "model": "m", "algorithm": name, "FAAvg": 1.0 - 0.1 * ranks[name][b]}
            for name in ranks for b, (s, t) in enumerate(blocks)]
    result = rank_methods(pd.DataFrame(rows))
    # average ranks 1.25, 1.75, 3: chi2_F = 12*4/(3*4) * (13.625 - 12) = 6.5; F_F = 3*6.5/(4*2 - 6.5) = 13
    assert result.average_ranks.to_dict() == {"m/A": 1.25, "m/B": 1.75, "m/C": 3.0}
    assert result.chi2 == pytest.approx(6.5)
    assert result.f == pytest.approx(13.0)


def test_report_from_the_training_table_alone(tmp_path):
    rows = []
    for algorithm, shift in (("erm", 0.0), ("padain", 0.05)):
        for study in ("ZSO", "ZGO", "CHGO"):
            for target, correlated in (("hue", "shape"), ("shape", "hue"), ("texture", "hue")):
                for sample in (0, 1):
                    acc = {"ZSO": 0.95, "ZGO": 0.1, "CHGO": 0.4}[study] + shift + 0.01 * sample
                    rows += single_epoch(study, target, correlated, sample, 0, acc, per_class=[acc, acc - 0.05, acc],
                                         shortcut=2 if study == "CHGO" else -1, algorithm=algorithm)
    write_table(tmp_path / "study", rows)
    path = write_study_report(tmp_path / "study", tmp_path / "out")
    html = path.read_text()
    for text in ("FAAvg and FAMin", "Table 2 layout", "Iman-Davenport", "Oracle", "data:image/png;base64,"):
        assert text in html
    assert html.count("<img") >= 4  # Fig. 4b, two Fig. 4a panels, the CD diagram
    aggregates = pd.read_csv(tmp_path / "out" / "factor_aggregates.csv")
    assert set(aggregates["study"]) == {"ZSO", "ZGO", "CHGO"} and len(aggregates) == 2 * 3 * 3
    ranks = pd.read_csv(tmp_path / "out" / "factor_ranks.csv")
    assert ranks["method"].tolist() == ["resnet18/padain", "resnet18/erm"]
    assert np.allclose(pd.read_csv(tmp_path / "out" / "factor_chgo.csv").shape, (2, 4))


def test_malformed_table_names_the_column(tmp_path):
    (tmp_path / "training.csv").write_text("study,target\nZSO,hue\n")
    with pytest.raises(FactorStudyError, match="column 'correlated' is missing"):
        load_training_table(tmp_path)
    with pytest.raises(FactorStudyError, match="run 'cuebench train"):
        load_training_table(tmp_path / "nowhere")
