"""The report end to end: a suppression experiment in a real SQLite store, the published raw data, the CLI,
and the HTML in headless chromium."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis import plots
from analysis.report import AnalysisOptions, analyze, write_report
from cuebench_app.cli import main as cuebench
from cuebench.responses import ResponseStore
from cuebench.trials import NOT_CLEAR

CATEGORIES = ("boat", "car", "cat", "dog")
# (condition, level, params, human factor, model factor): levels index the condition's grid as the builder does
ARMS = [("original", 0, {}, 1.0, 1.0)]
ARMS += [("patch_shuffle", lvl, {"grid": g}, 1 - 0.05 * i, 1 - 0.25 * i) for i, (lvl, g) in enumerate([(0, 2), (1, 3),
                                                                                                         (4, 6), (6, 8)])]
ARMS += [("bilateral", lvl, {"d": d, "sigma_color": s, "sigma_space": 75}, 1 - 0.02 * i, 1 - 0.1 * i)
         for i, (lvl, d, s) in enumerate([(0, 4, 50), (2, 8, 110), (4, 12, 170)])]
ARMS += [("grayscale", lvl, {"alpha": a}, 1.0, 1 - 0.05 * i) for i, (lvl, a) in enumerate([(0, 0.2), (2, 0.6), (4, 1.0)])]
ARMS += [("shape_cue", 0, {}, 0.9, 0.5), ("texture_cue", 0, {}, 0.6, 0.8)]


def suppression_responses(path, humans: int = 6, models=("lite0", "lite1", "lite2"), seed: int = 0) -> None:
    """A small suppression experiment answered by people (two assignment groups, one failing the attention
    check) and models, plus DiST oddity trials with catch trials, written through the real ResponseStore."""
    rng = np.random.default_rng(seed)
    images = [(f"{c}{i}", c) for c in CATEGORIES for i in range(5)]
    rows = []
    observers = [(f"p{j}", "human", 0.95 - 0.02 * j) for j in range(humans)] + [("p-bad", "human", 0.9)]
    observers += [(m, "model", 0.9 - 0.05 * k) for k, m in enumerate(models)]
    for observer, kind, base in observers:
        index = 0
        for cond, level, params, h_factor, m_factor in ARMS:
            for image, category in images:
                p = base * (h_factor if kind == "human" else m_factor)
                right = rng.random() < p
                answer = category if right else (NOT_CLEAR if kind == "human" and rng.random() < 0.3
                                                  else str(rng.choice([c for c in CATEGORIES if c != category])))
                rows.append(_row(observer, kind, index, f"{image}--{cond}--{level}", cond, level, params, category,
                                 answer, int(answer == category), group=int(observer[-1] in "024") if kind == "human"
                                 else None))
                index += 1
        if kind == "human":
            failed = observer == "p-bad"
            rows.append(_row(observer, kind, index, "attention-1", "attention", None, {}, "cat",
                             "dog" if failed else "car", int(not failed), role="attention", correct_answer="car"))
            index += 1
        for t in range(12):
            right = rng.random() < (0.85 if kind == "human" else 0.6)
            rows.append(_row(observer, kind, index, f"odd{t}", "dist", None, {}, None, "2" if right else "1",
                             int(right), trial_type="oddity", role="catch" if t % 4 == 3 else "test",
                             correct_answer="2"))
            index += 1
    with ResponseStore(path) as store:
        store.write_many(rows)


def _row(observer, kind, index, trial_id, condition, level, params, category, answer, correct, **extra):
    return {"experiment": "suppression-test", "observer": observer, "observer_kind": kind, "session": "1",
            "trial_index": index, "trial_id": trial_id, "role": "test", "trial_type": "classify",
            "condition": condition, "level": level, "params": params, "category": category, "response": answer,
            "correct_answer": category, "correct": correct, "rt_ms": None if kind == "model" else 650.0} | extra


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    root = tmp_path_factory.mktemp("experiment")
    suppression_responses(root / "responses.sqlite")
    return root


def test_analysis_of_a_suppression_experiment(experiment):
    from analysis.load import load_responses

    result = analyze(load_responses(experiment), AnalysisOptions(n_choices=16, n_boot=200))
    t = result.tables
    assert list(t["excluded_observers"]["observer"]) == ["p-bad"]
    rel = t["relative_accuracy"]
    assert set(rel["condition"]) == {"patch_shuffle", "bilateral", "grayscale", "shape_cue", "texture_cue"}
    # relative accuracy is each observer's suppressed accuracy over their own 'original' accuracy
    acc = t["accuracy"].set_index(["observer", "condition", "level"])["accuracy"]
    one = rel[(rel["observer"] == "lite0") & (rel["condition"] == "patch_shuffle") & (rel["level"] == 6)].iloc[0]
    assert one["relative_accuracy"] == pytest.approx(acc[("lite0", "patch_shuffle", 6)] / acc[("lite0", "original", 0)])
    assert set(t["cue_decomposition"]["observer"]) == {f"p{j}" for j in range(6)} | {"lite0", "lite1", "lite2"}
    odd = t["oddity"]
    assert set(odd["role"]) == {"test", "catch"} and (odd.groupby("observer")["n"].sum() == 12).all()
    assert set(t["error_consistency"]["pair"]) == {"human-human", "human-model", "model-model"}
    assert set(t["noise_ceilings"]["group"]) == {"human", "model"}
    tests = t["ttests"]
    assert tests["p_corr"].notna().sum() >= 1 and (tests["pairing"] == "item").all()
    assert result.friedman is not None and "humans (mean)" in result.friedman.average_ranks.index
    grouped = analyze(load_responses(experiment), AnalysisOptions(n_choices=16, n_boot=50, pairing="group"),
                      only={"ttests"})
    assert (grouped.tables["ttests"]["n"].dropna() <= 2).all()


def test_model_vs_human_export_round_trip_keeps_the_pairing(experiment, tmp_path):
    from analysis.consistency import error_consistency
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from cuebench.expdir import ExperimentDir
    from cuebench.export import export_mvh

    export_mvh(ExperimentDir(experiment), tmp_path / "mvh")
    scored_direct = apply_exclusions(load_responses(experiment)).scored
    scored_raw = apply_exclusions(load_responses(tmp_path / "mvh")).scored
    direct = error_consistency(scored_direct[scored_direct["trial_type"] == "classify"], n_boot=10)
    via_raw = error_consistency(scored_raw[scored_raw["trial_type"] == "classify"], n_boot=10)
    key = ["observer_a", "observer_b"]
    merged = direct.merge(via_raw, on=key, suffixes=("", "_raw"))
    assert len(merged) == len(direct) > 0
    assert (merged["n_shared"] == merged["n_shared_raw"]).all()
    assert np.allclose(merged["kappa"], merged["kappa_raw"], equal_nan=True)


def test_reference_markers_find_the_published_settings(experiment):
    from analysis.load import load_responses

    df = load_responses(experiment)
    levels = df.drop_duplicates(["condition", "level"])[["condition", "level", "params"]]
    assert plots.reference_level(levels, "patch_shuffle", {"grid": 3}) == 1
    assert plots.reference_level(levels, "patch_shuffle", {"grid": 6}) == 4
    assert plots.reference_level(levels, "bilateral", {"d": 12, "sigma_color": 170}) == 4
    assert plots.reference_level(levels, "grayscale", {"alpha": 1.0}) == 4
    assert plots.reference_level(levels, "patch_shuffle", {"grid": 16}) is None


@pytest.mark.slow
def test_report_files_and_browser(experiment, tmp_path, browser):
    out = tmp_path / "report"
    html = write_report([experiment], out, options=AnalysisOptions(n_boot=200), progress=False)
    assert html == out / "report.html"
    text = html.read_text()
    assert "published human data, Burgert et al. 2025, Table 3" in text
    assert "<script" not in text and "http://" not in text  # self-contained: nothing to fetch
    for name in ("relative_accuracy", "cue_decomposition", "oddity", "error_consistency", "noise_ceilings", "ttests",
                 "friedman_ranks", "exclusions"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["observers"] == 9
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["options"]["n_boot"] == 200 and prov["reference"] == "burgert2025"
    assert len(prov["sources"][0]["files"]["responses.sqlite"]) == 64 and "pingouin" in prov["versions"]
    shot = check_in_browser(browser, html, tmp_path / "report.png")
    assert shot.stat().st_size > 50_000


def check_in_browser(browser, html, screenshot):
    """Open the page in headless chromium: no console errors, every image decoded; full-page screenshot."""
    errors = []
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(html.resolve().as_uri(), wait_until="load", timeout=30_000)
    sizes = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])")
    page.screenshot(path=str(screenshot), full_page=True)
    assert errors == []
    assert sizes and all(done and width > 300 for _, done, width in sizes), sizes
    return screenshot


@pytest.mark.slow
def test_report_without_humans_draws_the_published_reference(tmp_path):
    store = tmp_path / "models" / "responses.sqlite"
    suppression_responses(store, humans=0)
    with ResponseStore(store) as s:
        models_only = s.dataframe()
    models_only = models_only[models_only["observer_kind"] == "model"]
    source, other = tmp_path / "models.csv", tmp_path / "lite2.csv"
    models_only[models_only["observer"] != "lite2"].to_csv(source, index=False)
    models_only[models_only["observer"] == "lite2"].to_csv(other, index=False)
    out = tmp_path / "out"
    html = write_report([source], out, compare=[other], options=AnalysisOptions(n_boot=50), progress=False)
    assert json.loads((out / "results.json").read_text())["summary"]["observers"] == 3
    assert json.loads((out / "provenance.json").read_text())["compare"][0]["path"] == "lite2.csv"  # outside the cwd
    assert str(tmp_path) not in html.read_text()
    text = html.read_text()
    assert text.count("data:image/png;base64,") >= 4
    assert "published human data, Burgert et al. 2025, Table 3" in text
    assert not (out / "tables" / "ttests.csv").exists()


@pytest.mark.slow
@pytest.mark.shared
def test_report_and_analyze_from_the_geirhos_folder_alone(shared, tmp_path, capsys, browser):
    folder = shared / "data/geirhos2019/raw-data/cue-conflict"
    csv = tmp_path / "sb.csv"
    assert cuebench(["analyze", str(folder), "--metric", "shape-bias", "--out", str(csv)]) == 0
    sb = pd.read_csv(csv)
    assert list(sb.columns) == ["observer", "shape_bias", "n_shape", "n_texture"]  # as --help says
    assert sb.set_index("observer")["shape_bias"].round(3)["alexnet"] == 0.429
    assert cuebench(["analyze", str(folder), "--metric", "oddity"]) == 2
    assert "needs oddity trials" in capsys.readouterr().err
    out = tmp_path / "report"
    assert cuebench(["report", str(folder), "--out", str(out), "--n-boot", "100", "--reference", "none"]) == 0
    html = out / "report.html"
    assert "Shape bias" in html.read_text()
    ceilings = pd.read_csv(out / "tables" / "noise_ceilings.csv").set_index(["group", "measure"])
    assert 0 < ceilings.loc[("human", "accuracy"), "lower"] < ceilings.loc[("human", "accuracy"), "upper"] < 1
    check_in_browser(browser, html, tmp_path / "geirhos.png")


def test_report_dispatches_a_factor_study_folder(tmp_path, capsys):
    (tmp_path / "study.json").write_text("{}")
    assert cuebench(["report", str(tmp_path)]) == 2
    error = capsys.readouterr().err  # the factor-study schema answered, not the response loader
    assert "study.json: field 'format': is missing" in error and "experiment.json" not in error


def test_analyze_prints_the_main_tables_and_refuses_out_without_a_metric(experiment, tmp_path, capsys):
    assert cuebench(["analyze", str(experiment), "--n-boot", "20"]) == 0
    printed = capsys.readouterr().out
    for table in ("exclusion_summary", "group_relative_accuracy", "cue_decomposition", "oddity", "ttests"):
        assert f"== {table}" in printed
    assert cuebench(["analyze", str(experiment), "--out", str(tmp_path / "x.csv")]) == 2
    assert "--metric" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
    assert cuebench(["analyze", str(experiment), "--correlate", "S_cd", "R_cd"]) == 0
    assert "S_cd" in capsys.readouterr().out
