"""Report sections are one registry: a section defined in one file reaches the report, the
``analyze --metric`` choices and ``cuebench list report-sections``; sections that do not apply
to the design are left out of the report."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from analysis.report import AnalysisOptions, analyze, write_report
from analysis.sections import SECTIONS, Section, all_metrics
from cuebench_app.cli import main as cuebench
from cuebench.responses import ResponseStore


def _rows(conditions, observers=("p0", "p1"), kind="human", texture=None):
    rows = []
    for observer in observers:
        for i, (condition, level, params) in enumerate(conditions):
            for image, category in enumerate(("cat", "dog", "cat", "dog")):
                answer = category if (image + i + len(observer)) % 3 else ("dog" if category == "cat" else "cat")
                rows.append({"experiment": "toy", "observer": observer, "observer_kind": kind, "session": "1",
                             "trial_index": len(rows), "trial_id": f"{image}-{condition}-{level}", "role": "test",
                             "trial_type": "classify", "condition": condition, "level": level, "params": params,
                             "category": category, "response": answer, "correct_answer": category,
                             "correct": int(answer == category), "texture_category": texture and
                             ("dog" if category == "cat" else "cat"), "rt_ms": 500.0})
    return rows


@pytest.fixture
def toy_section():
    class Dogs(Section):
        """Fraction of 'dog' answers per observer (a toy metric)."""

        name = "toy-dogs"
        title = "Dog answers"
        order = 5
        metrics = {"dog-answers": "dog_answers"}
        needs = "classification trials"
        template = "<p>dog answers:</p>{{ tables.dog_answers|safe }}"

        def compute(self, result, scored, options, n_choices):
            result.tables["dog_answers"] = (scored.assign(dog=scored["response"] == "dog")
                                            .groupby("observer", as_index=False)["dog"].mean())

    with SECTIONS.temporarily(Dogs.name, Dogs):
        yield Dogs


def test_a_section_from_one_class_appears_in_report_and_cli(toy_section, tmp_path, capsys):
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write_many(_rows([("original", None, {})]))
    html = write_report([tmp_path / "r.sqlite"], tmp_path / "out", options=AnalysisOptions(n_boot=20),
                        progress=False).read_text()
    assert '<h2 id="toy-dogs">Dog answers</h2>' in html and "dog answers:" in html
    # by hand from _rows: images cat, dog, cat, dog; (image + 0 + 2) % 3 == 0 only for image 1, which is
    # answered "cat": the answers are cat, cat, cat, dog for both observers
    table = pd.read_csv(tmp_path / "out" / "tables" / "dog_answers.csv")
    assert table.set_index("observer")["dog"].to_dict() == {"p0": 0.25, "p1": 0.25}
    assert "dog-answers" in all_metrics()
    assert cuebench(["list", "report-sections"]) == 0
    assert "toy-dogs" in capsys.readouterr().out


class Hesitation(Section):
    """Share of answers slower than 600 ms per observer (a toy metric that declares what the commands show)."""

    name = "toy-hesitation"
    title = "Hesitation"
    order = 6
    metrics = {"hesitation": "hesitation"}
    metric_columns = {"hesitation": ("observer", "slow")}
    summary_tables = ("hesitation",)
    needs = "answer times"
    template = "<p>hesitation:</p>{{ tables.hesitation|safe }}{{ hesitation_reference|safe }}"

    def compute(self, result, scored, options, n_choices):
        result.tables["hesitation"] = scored.assign(slow=scored["rt_ms"] > 600).groupby(
            "observer", as_index=False).agg(slow=("slow", "mean"), trials=("slow", "size"))

    def references(self, analysis, reference):
        return {"hesitation_reference": f"<p>published hesitation ({reference}): 0.125</p>"} if reference else {}


def test_the_commands_learn_a_section_s_tables_and_references_from_the_section(tmp_path, capsys):
    """``analyze`` prints the section's ``summary_tables`` and its ``metric_columns``, the report shows what its
    ``references`` give, asked for with ``--reference``: neither command names the section."""
    with SECTIONS.temporarily(Hesitation.name, Hesitation):
        rows = _rows([("original", None, {})])
        for row in rows[::4]:
            row["rt_ms"] = 900.0  # rows are p0's 4 answers, then p1's: the first of each is slow, 1 of 4
        with ResponseStore(tmp_path / "r.sqlite") as store:
            store.write_many(rows)
        assert cuebench(["analyze", str(tmp_path / "r.sqlite"), "--n-boot", "20"]) == 0
        assert "== hesitation" in capsys.readouterr().out
        assert cuebench(["analyze", str(tmp_path / "r.sqlite"), "--metric", "hesitation", "--out",
                         str(tmp_path / "h.csv")]) == 0
        table = pd.read_csv(tmp_path / "h.csv")
        assert list(table.columns) == ["observer", "slow"] and table["slow"].tolist() == [0.25, 0.25]
        html = write_report([tmp_path / "r.sqlite"], tmp_path / "out", reference="burgert2025",
                            options=AnalysisOptions(n_boot=20), progress=False).read_text()
        assert "hesitation:" in html and "published hesitation (burgert2025): 0.125" in html


def test_sections_follow_the_design(tmp_path):
    suppression = _rows([("original", None, {}), ("patch_shuffle", 0, {"grid": 3}), ("patch_shuffle", 1, {"grid": 6})])
    conflict = _rows([("cue-conflict", None, {})], texture=True)
    for name, rows in (("suppression", suppression), ("conflict", conflict)):
        with ResponseStore(tmp_path / f"{name}.sqlite") as store:
            store.write_many(rows)
        write_report([tmp_path / f"{name}.sqlite"], tmp_path / name, options=AnalysisOptions(n_boot=20),
                     progress=False)
    sup = json.loads((tmp_path / "suppression" / "results.json").read_text())
    cc = json.loads((tmp_path / "conflict" / "results.json").read_text())
    assert {"reliance", "classwise", "thresholds"} <= set(sup["sections"]) and "shape-bias" not in sup["sections"]
    assert "shape-bias" in cc["sections"] and not {"reliance", "classwise", "thresholds", "oddity"} & set(cc["sections"])
    sup_html = (tmp_path / "suppression" / "report.html").read_text()
    cc_html = (tmp_path / "conflict" / "report.html").read_text()
    assert "Burgert et al. 2025, Table 3" in sup_html and "Burgert" not in cc_html
    assert "Geirhos et al. 2019, cue-conflict experiment" in cc_html and "Geirhos et al. 2019, cue" not in sup_html
    assert 'id="shape-bias"' not in sup_html and 'id="oddity"' not in sup_html and 'id="oddity"' not in cc_html
    # two people: noise ceiling and t-intervals say what they need instead of printing nan
    assert not re.search(r"\bnan\b", re.sub(r'src="data:[^"]*"', "", sup_html), re.IGNORECASE)
    for stem in ("reliance", "classwise", "shape_bias"):
        folder = tmp_path / ("conflict" if stem == "shape_bias" else "suppression") / "figures"
        assert {p.suffix for p in folder.glob(f"{stem}.*")} == {".png", ".svg", ".pdf"}


def _report(tmp_path, name, rows) -> tuple[dict, str]:
    with ResponseStore(tmp_path / f"{name}.sqlite") as store:
        store.write_many(rows)
    html = write_report([tmp_path / f"{name}.sqlite"], tmp_path / name, options=AnalysisOptions(n_boot=20),
                        progress=False).read_text()
    return json.loads((tmp_path / name / "results.json").read_text()), html


def _oddity_rows(observers=("p0", "p1", "m0")):
    rows = []
    for observer in observers:
        for i in range(6):
            role = "catch" if i == 5 else "test"
            answer = str(1 + (i + len(observer)) % 3)
            rows.append({"experiment": "dist", "observer": observer, "observer_kind": "model" if observer == "m0"
                         else "human", "session": "1", "trial_index": i, "trial_id": f"dist--{i}", "role": role,
                         "trial_type": "oddity", "condition": "dist" if role == "test" else "catch", "level": None,
                         "params": {}, "category": "lizard", "response": answer, "correct_answer": "2",
                         "correct": int(answer == "2"), "rt_ms": 700.0})
    return rows


def test_a_dist_report_has_oddity_and_nothing_of_classification_designs(tmp_path):
    results, html = _report(tmp_path, "dist", _oddity_rows())
    assert "oddity" in results["sections"]
    assert not {"reliance", "thresholds", "shape-bias", "cue-decomposition", "adaptive"} & set(results["sections"])
    assert "Burgert" not in html and "Geirhos et al. 2019, cue" not in html
    catch = [r for r in results["tables"]["oddity"] if r["role"] == "catch"]
    assert {r["observer"] for r in catch} == {"p0", "p1", "m0"}  # catch trials reported apart


def test_a_cue_decomposition_report_has_s_cd_and_no_reliance(tmp_path):
    rows = _rows([("original", None, {}), ("shape_cue", None, {}), ("texture_cue", None, {})])
    rows += _rows([("original", None, {}), ("shape_cue", None, {}), ("texture_cue", None, {})],
                  observers=("m0", "m1"), kind="model")
    results, html = _report(tmp_path, "cues", rows)
    assert "cue-decomposition" in results["sections"]
    assert not {"reliance", "thresholds", "shape-bias", "oddity"} & set(results["sections"])
    assert "Burgert" not in html and {"Q_S_low", "Q_S_high", "S_cd"} <= set(results["tables"]["cue_decomposition"][0])


def test_a_corruptions_report_has_reliance_without_burgerts_table(tmp_path):
    """Corruptions are graded suppressions, but not the transforms Burgert et al. measured."""
    grid = [("original", None, {}), ("contrast", 0, {"contrast": 1.0}), ("contrast", 1, {"contrast": 0.3}),
            ("contrast", 2, {"contrast": 0.1}), ("high_pass", 0, {"sigma": "inf"}), ("high_pass", 1, {"sigma": 3.0})]
    results, html = _report(tmp_path, "corruptions", _rows(grid))
    assert {"reliance", "thresholds"} <= set(results["sections"])
    assert not {"shape-bias", "cue-decomposition", "oddity"} & set(results["sections"])
    assert "Table 3" not in html and not (tmp_path / "corruptions" / "figures" / "reference.png").exists()


def test_adaptive_blocks_report_each_posterior_and_the_population_mean(tmp_path):
    """Two people's QUEST+ blocks on a 5-level grid (sigma 2-18, four answers per level, 2 classes): p1 right up to
    sigma 6, p2 up to 10, so both thresholds lie inside the grid (neither prior-only nor censored). Each row is the
    last stored posterior; the population mean of the two is their mean 10, its interval symmetric around it and
    (Student's t with one degree of freedom, its prior bounded at three grid spans) beyond the grid."""
    rows = []
    for observer, last_right, final in (("p1", 6, (8.0, 6.0, 10.0)), ("p2", 10, (12.0, 8.0, 16.0))):
        answers = [(level, sigma, sigma <= last_right) for level, sigma in enumerate(range(2, 19, 4), start=3)] * 4
        for i, (level, sigma, right) in enumerate(answers):
            category = ("cat", "dog")[i % 2]
            estimate = final if i == len(answers) - 1 else (9.0, 3.0, 15.0)
            rows.append({"experiment": "toy", "observer": observer, "observer_kind": "human",
                         "session": "adaptive-blur", "trial_index": i, "trial_id": f"{category}{i}-blur", "role": "test",
                         "trial_type": "classify", "condition": "blur", "level": level, "params": {"sigma": sigma},
                         "category": category, "response": category if right else ("dog", "cat")[i % 2],
                         "correct_answer": category, "correct": int(right), "rt_ms": 500.0,
                         "adaptive": dict(zip(("quest_threshold", "ci_low", "ci_high"), estimate), trials=i + 1)})
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write_many(rows)
    html = write_report([tmp_path / "r.sqlite"], tmp_path / "out", options=AnalysisOptions(n_boot=20),
                        progress=False).read_text()
    table = pd.read_csv(tmp_path / "out" / "tables" / "adaptive_thresholds.csv").set_index("observer")
    assert table.loc["p1", ["quest_threshold", "ci_low", "ci_high", "trials"]].tolist() == [8.0, 6.0, 10.0, 20]
    assert table.loc["p2", "quest_threshold"] == 12.0 and table.loc[["p1", "p2"], "label"].isna().all()  # in 2-18
    population = table.loc["humans (population mean)"]
    assert population["quest_threshold"] == pytest.approx(10.0, abs=0.01) and population["observers"] == 2
    low, high = population["ci_low"], population["ci_high"]
    assert high - 10.0 == pytest.approx(10.0 - low, abs=0.01) and low < 2 and high > 18  # beyond either one's interval
    assert "t-interval over observers" in population["note"] and population["label"] == "extrapolated"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    method = results["summary"]["adaptive"]["method"]
    assert method["pooling"].startswith("population mean") and method["population means"][0]["identified"]
    assert "Population means (2 humans on blur) are the Student-t interval over observers" in method["sentence"]
    assert 'id="adaptive"' in html and (tmp_path / "out" / "figures" / "adaptive.svg").is_file()


def test_published_shape_biases_match_the_released_geirhos_data(shared):
    """The reference values the cue-conflict report shows, recomputed from the raw data of Geirhos et al. 2019."""
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.metrics import shape_bias
    from analysis.reference import geirhos2019_summary

    scored = apply_exclusions(load_responses(shared / "data/geirhos2019/raw-data/cue-conflict")).scored
    bias = shape_bias(scored).set_index("observer")["shape_bias"]
    published = geirhos2019_summary()
    humans = bias[bias.index.str.startswith("subject-")]
    assert len(humans) == 10
    assert round(humans.mean(), 3) == published["Humans (mean of 10)"]
    for name, key in (("alexnet", "AlexNet"), ("googlenet", "GoogLeNet"), ("vgg", "VGG-16")):
        assert round(bias[name], 3) == published[key]


def test_the_released_cue_conflict_data_get_cue_conflict_sections_only(shared):
    """Geirhos et al.'s raw CSVs name their condition after the folder ("cue-conflict"): the report must
    still see cue-conflict images (they carry a texture class), not a suppressed condition, so no
    reliance curves, thresholds or Burgert reference appear."""
    from analysis.load import load_responses

    analysis = analyze(load_responses(shared / "data/geirhos2019/raw-data/cue-conflict"), AnalysisOptions(n_boot=20),
                       only={"reliance", "thresholds", "shape-bias"})
    assert "shape-bias" in analysis.sections and not {"reliance", "thresholds"} & set(analysis.sections)


def _kappa_figure_texts(shared_trials: dict[tuple[str, str], int]):
    from analysis import consistency, plots

    pairs = pd.DataFrame([{"observer_a": a, "observer_b": b, "kappa": 0.25 * k, "n_shared": n}
                          for k, ((a, b), n) in enumerate(shared_trials.items())])
    observers = ["P01", "P02", "lite0"]
    kinds = pd.Series({"P01": "human", "P02": "human", "lite0": "model"})
    fig = plots.consistency_matrix_plot(consistency.pair_matrix(pairs, observers, "kappa"),
                                        consistency.pair_matrix(pairs, observers, "n_shared"), kinds)
    ax = fig.axes[0]
    return ax.get_title(), sorted(t.get_text() for t in ax.texts)


def test_the_kappa_heat_map_says_how_many_trials_each_kappa_rests_on():
    title, cells = _kappa_figure_texts({("P01", "P02"): 9, ("P01", "lite0"): 9, ("P02", "lite0"): 9})
    assert title.endswith("on 9 shared trials per pair; people in bold, models in italics")
    assert cells == ["0.00", "0.00", "0.25", "0.25", "0.50", "0.50"]
    title, cells = _kappa_figure_texts({("P01", "P02"): 9, ("P01", "lite0"): 40, ("P02", "lite0"): 31})
    assert title.endswith("on shared trials (9-40 per pair, n in each cell); people in bold, models in italics")
    assert cells == ["0.00\nn=9", "0.00\nn=9", "0.25\nn=40", "0.25\nn=40", "0.50\nn=31", "0.50\nn=31"]


def test_relative_accuracy_leaves_out_the_trials_of_an_adaptive_block(tmp_path):
    """One person, fixed levels: originals 4/4, blur level 1 2/4 -> relative accuracy 0.5 by hand. A QUEST+ block
    on blur adds 4 right answers at level 1 (session adaptive-blur); counted, they would give 6/8 -> 0.75."""
    fixed = [("original", None, {}), ("blur", 1, {"sigma": 1})]
    rows = []
    for condition, level, params in fixed:
        for image, category in enumerate(("cat", "dog", "cat", "dog")):
            answer = category if condition == "original" or image < 2 else ("dog" if category == "cat" else "cat")
            rows.append({"experiment": "toy", "observer": "p0", "observer_kind": "human", "session": "1",
                         "trial_index": len(rows), "trial_id": f"{image}-{condition}", "role": "test",
                         "trial_type": "classify", "condition": condition, "level": level, "params": params,
                         "category": category, "response": answer, "correct_answer": category,
                         "correct": int(answer == category), "texture_category": None, "rt_ms": 500.0})
    for i in range(4):
        rows.append({**rows[-1], "session": "adaptive-blur", "trial_index": i, "trial_id": f"q{i}-blur",
                     "response": "cat", "category": "cat", "correct_answer": "cat", "correct": 1,
                     "adaptive": {"quest_threshold": 1.5, "ci_low": 1.0, "ci_high": 2.0, "trials": i + 1}})
    from analysis.load import load_responses

    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write_many(rows)
    result = analyze(load_responses([tmp_path / "r.sqlite"]), AnalysisOptions(n_boot=20), only={"reliance"})
    rel = result.tables["relative_accuracy"].set_index("condition")
    assert rel.loc["blur", "relative_accuracy"] == pytest.approx(0.5)
