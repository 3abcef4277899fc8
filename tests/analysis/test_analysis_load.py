"""Loading every source kind, and exclusions with their reasons, on a real SQLite store and the published raw data."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.exclusions import ExclusionOptionError, ExclusionOptions, apply_exclusions
from analysis.load import LoadError, load_responses, raw_trial_ids, stimulus_name, texture_class
from analysis.metrics import shape_bias
from cuebench.responses import COLUMNS, ResponseStore
from cuebench.trials import NOT_CLEAR

PUBLISHED_MODELS = {"alexnet": 0.429, "googlenet": 0.312, "vgg": 0.172}


def response(observer, index, *, role="test", correct=1, response="cat", kind="human", **extra):
    return {"experiment": "exp", "observer": observer, "observer_kind": kind, "session": "1", "trial_index": index,
            "trial_id": f"t{index}", "role": role, "trial_type": "classify", "condition": "original",
            "category": "cat", "response": response, "correct": correct} | extra


@pytest.fixture()
def store_path(tmp_path):
    rows = [response("p1", i) for i in range(4)]
    rows += [response("p1", 4, role="attention", correct=1), response("p1", 5, role="catch", correct=1)]
    rows += [response("p2", i, correct=0, response="dog") for i in range(3)]
    rows += [response("p2", 3, role="attention", correct=0, response="dog")]                       # fails the check
    rows += [response("p3", 0, response=NOT_CLEAR, correct=0), response("p3", 1, response="", correct=0, timed_out=1),
             response("p3", 2, excluded=1, exclusion_reason="refresh rate 30 Hz below 55 Hz"),
             response("p3", 3, events=[{"type": "blur", "t": 120}]), response("p3", 4, dropped_frames=3),
             response("p3", 5, role="practice")]
    rows += [response("m", i, kind="model") for i in range(4)]
    path = tmp_path / "responses.sqlite"
    with ResponseStore(path) as store:
        store.write_many(rows)
    return path


@pytest.mark.shared
@pytest.mark.validates(
    'shape bias per observer from the model-vs-human raw data',
    definition='shape decisions / (shape + texture decisions) over conflicting images',
    source='Geirhos et al. 2019, Sec. 3',
    reference='published values: AlexNet 0.429, GoogLeNet 0.312, VGG-16 0.172, humans 0.96 (each 0.91-0.99)',
    tolerance='3 decimals (models), 2 decimals (human mean)')
def test_raw_geirhos_folder_reproduces_published_shape_bias(shared):
    df = load_responses(shared / "data/geirhos2019/raw-data/cue-conflict")
    kinds = df.drop_duplicates("observer").set_index("observer")["observer_kind"]
    assert {o for o, k in kinds.items() if k == "model"} == set(PUBLISHED_MODELS)
    sb = shape_bias(apply_exclusions(df).scored).set_index("observer")
    for model, value in PUBLISHED_MODELS.items():
        assert round(sb.loc[model, "shape_bias"], 3) == value
    humans = sb[sb["observer_kind"] == "human"]["shape_bias"]
    assert len(humans) == 10 and humans.between(0.91, 0.99).all()
    assert round(humans.mean(), 2) == 0.96
    # the 80 same-class images are left out: 1200 conflict trials per model
    assert (sb.loc["vgg", "n_shape"] + sb.loc["vgg", "n_texture"]) <= 1200


def test_raw_csv_variants_na_answers_and_session_spelling(tmp_path):
    folder = tmp_path / "cue-conflict"
    folder.mkdir()
    (folder / "exp_subject-01_session_1.csv").write_text(
        "subj,Session,trial,rt,object_response,category,condition,imagename\n"
        "subject-01,1,1,0.8,cat,cat,0,0001_s5n_s01_0_cat_00_cat1-dog2.png\n"
        "subject-01,1,2,na,na,car,0,0002_s5n_s01_0_car_00_car3-car1.png\n"
        "subject-01,1,3,1.1,dog,cat,0,0003_s5n_s01_0_cat_00_cat2-dog10.png\n")
    (folder / "exp_resnet50_session_1.csv").write_text(
        "subj,session,trial,rt,object_response,category,condition,imagename\n"
        "resnet50,1,1,NaN,dog,cat,0,0001_s5n_dnn_0_cat_00_cat1-dog2.png\n")
    df = load_responses(folder)
    assert list(df.columns) == list(COLUMNS)
    h = df[df["observer"] == "subject-01"].set_index("trial_index")
    assert set(h["observer_kind"]) == {"human"}
    assert df.loc[df["observer"] == "resnet50", "observer_kind"].iloc[0] == "model"
    assert h.loc[1, "response"] == "" and h.loc[1, "timed_out"] == 1 and h.loc[1, "correct"] == 0
    assert h.loc[0, "rt_ms"] == pytest.approx(800.0)
    # the observer token (s01 / dnn) and the trial number are dropped, so both observers share the id
    assert list(h["trial_id"]) == ["s5n_0_cat_00_cat1-dog2", "s5n_0_car_00_car3-car1", "s5n_0_cat_00_cat2-dog10"]
    assert df.loc[df["observer"] == "resnet50", "trial_id"].iloc[0] == "s5n_0_cat_00_cat1-dog2"
    assert list(h["source_image"]) == ["cat1-dog2", "car3-car1", "cat2-dog10"]
    assert list(h["texture_category"]) == ["dog", "car", "dog"]
    assert set(df["condition"]) == {"cue-conflict"} and json.loads(h.loc[0, "params"]) == {"condition": "0"}
    assert stimulus_name("x/0001_s5n_dnn_0_airplane_00_airplane1-bicycle2.png") == "airplane1-bicycle2"
    assert texture_class("a.png") is None


def test_raw_trial_ids_drop_observer_tokens_of_cuebench_exports():
    human = pd.Series(["0001_human_patch-shuffle_0_cat_chelsea.png", "0002_human_original__cat_chelsea.png"])
    model = pd.Series(["0001_model_original__cat_chelsea.png", "0002_model_patch-shuffle_0_cat_chelsea.png"])
    ids_h, ids_m = raw_trial_ids([human, model])
    assert list(ids_h) == ["patch-shuffle_0_cat_chelsea", "original__cat_chelsea"]
    assert set(ids_h) == set(ids_m)
    # one file alone: nothing tells observer tokens apart, only the trial number goes
    assert list(raw_trial_ids([model])[0]) == ["model_original__cat_chelsea", "model_patch-shuffle_0_cat_chelsea"]


def test_store_csv_and_parquet_give_the_same_table(store_path, tmp_path):
    from_store = load_responses(store_path.parent)
    with ResponseStore(store_path) as store:
        exported = store.dataframe()
    exported.to_csv(tmp_path / "r.csv", index=False)
    exported.to_parquet(tmp_path / "r.parquet", index=False)
    for other in (tmp_path / "r.csv", tmp_path / "r.parquet"):
        loaded = load_responses(other)
        pd.testing.assert_frame_equal(loaded.drop(columns=["created_at"]), from_store.drop(columns=["created_at"]))


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(LoadError, match="no such file"):
        load_responses(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("observer,trial_id,response,colour\np,t,cat,red\n")
    with pytest.raises(LoadError, match="bad.csv.*'colour'"):
        load_responses(bad)
    bad.write_text("observer,trial_id,response,observer_kind\np,t,cat,robot\n")
    with pytest.raises(LoadError, match="robot"):
        load_responses(bad)
    bad.write_text("observer,trial_id,response,level\np,t,cat,high\n")
    with pytest.raises(LoadError, match="'level'.*'high'"):
        load_responses(bad)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(LoadError, match="unknown response file type"):
        load_responses(tmp_path / "notes.txt")


def test_exclusions_with_reasons(store_path):
    cleaned = apply_exclusions(load_responses(store_path))
    log = cleaned.log
    reasons = dict(zip(zip(log["observer"], log["trial_id"]), log["reason"]))
    # p2 failed its one attention check: every trial out, and p2 is listed as having nothing left
    assert all("attention check" in reasons[("p2", f"t{i}")] for i in range(4))
    assert list(cleaned.excluded_observers["observer"]) == ["p2"]
    assert "p2" not in set(cleaned.scored["observer"])
    assert reasons[("p3", "t1")] == "timeout (no answer)"
    assert reasons[("p3", "t2")] == "excluded: refresh rate 30 Hz below 55 Hz"
    assert reasons[("p3", "t3")] == "left the page or window during the trial"
    assert reasons[("p3", "t5")] == "role 'practice' is never scored"
    assert reasons[("p1", "t4")] == "role 'attention' is never scored"
    # 'not clear' is an error by default; dropped frames are kept unless a limit is set; catch trials apart
    kept = cleaned.scored.set_index(["observer", "trial_id"])
    assert kept.loc[("p3", "t0"), "correct"] == 0
    assert ("p3", "t4") in kept.index
    assert list(cleaned.catch["trial_id"]) == ["t5"] and "catch" not in set(cleaned.scored["role"])
    summary = cleaned.summary().set_index("reason")
    assert summary.loc["timeout (no answer)", "rows"] == 1


def test_exclusion_options(store_path):
    df = load_responses(store_path)
    lenient = apply_exclusions(df, ExclusionOptions(max_attention_failures=1, not_clear="exclude",
                                                    timeouts="error", max_dropped_frames=2))
    kept = lenient.scored.set_index(["observer", "trial_id"])
    assert "p2" in set(lenient.scored["observer"]) and lenient.excluded_observers.empty
    assert ("p3", "t0") not in kept.index  # not clear excluded
    assert kept.loc[("p3", "t1"), "correct"] == 0  # timeout scored wrong
    assert ("p3", "t4") not in kept.index  # 3 dropped frames > 2
    with pytest.raises(ExclusionOptionError, match="not_clear"):
        ExclusionOptions(not_clear="maybe")


@pytest.mark.validates("catch-trial accuracy per person", definition="catch_accuracy = right catch answers / catch "
                       "trials of the person, a timeout counted wrong, before exclusions",
                       source="Wen et al. 2024 (DiST catch trials); docs/analysis.md", reference="hand count",
                       tolerance="exact")
def test_catch_trials_are_reported_per_person_and_max_catch_errors_excludes(tmp_path):
    """Catch trials of a classification study: per person 2 of 3 and 0 of 2 right (by hand); with
    --max-catch-errors 1, the person with 2 wrong is left out entirely, the other (1 wrong) stays."""
    from analysis.exclusions import catch_performance

    rows = [response("good", i) for i in range(3)] + [response("poor", i) for i in range(3)]
    rows += [response("good", 3, role="catch"), response("good", 4, role="catch"),
             response("good", 5, role="catch", correct=0, response="dog")]
    rows += [response("poor", 3, role="catch", correct=0, response="dog"),
             response("poor", 4, role="catch", correct=None, response="", timed_out=1)]
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write_many(rows)
    df = load_responses(tmp_path / "r.sqlite")
    table = catch_performance(df).set_index("observer")
    assert table.loc["good", ["catch_trials", "catch_correct"]].tolist() == [3, 2]
    assert table.loc["poor", ["catch_trials", "catch_correct", "catch_accuracy"]].tolist() == [2, 0, 0.0]
    assert table.loc["good", "catch_accuracy"] == pytest.approx(2 / 3)
    assert apply_exclusions(df).excluded_observers.empty  # no rule by default
    strict = apply_exclusions(df, ExclusionOptions(max_catch_errors=1))
    assert list(strict.excluded_observers["observer"]) == ["poor"]
    assert "answered 2 catch trial(s) wrong (allowed 1)" in strict.excluded_observers["reason"].iloc[0]
    # the HTML report shows them: 2 + 0 of 3 + 2 right, the rule applied, and the per-person table
    from analysis.report import AnalysisOptions, write_report

    write_report([tmp_path / "r.sqlite"], tmp_path / "report", options=AnalysisOptions(
        n_boot=10, exclusions=ExclusionOptions(max_catch_errors=1)), progress=False)
    html = (tmp_path / "report" / "report.html").read_text()
    catch_part = html[html.index('<h2 id="catch">'):html.index('<h2 id="exclusions">')]
    assert "people got 2 of 5 right (40.0 %, 2 people)" in catch_part
    assert "a person with more than 1 wrong was excluded" in catch_part
    assert "<td>good</td>" in catch_part and "<td>poor</td>" in catch_part


def test_logged_exclusions_and_pilots_leave_the_human_statistics(tmp_path):
    from analysis.metrics import accuracy
    from cuebench import exclusions

    rows = [response("h1", i, correct=int(i < 3)) for i in range(4)]          # 3 of 4 right
    rows += [response("h2", i, correct=0, response="dog") for i in range(4)]  # excluded by the admin below
    rows += [response("sim", i, kind="pilot", correct=1) for i in range(4)]   # a simulated lab session
    path = tmp_path / "responses.sqlite"
    with ResponseStore(path) as store:
        store.write_many(rows)
        exclusions.record(store.conn, "exp", "h2", True, "typed the same key throughout", "admin")
    cleaned = apply_exclusions(load_responses(path))
    assert set(cleaned.scored["observer"]) == {"h1"}
    assert dict(zip(cleaned.excluded_observers["observer"], cleaned.excluded_observers["reason"])) == {
        "h2": "excluded: admin: typed the same key throughout",
        "sim": "pilot session (counted only with --include-pilots)"}
    humans = accuracy(cleaned.scored)
    assert list(humans["accuracy"]) == [0.75]
    with_pilots = apply_exclusions(load_responses(path), ExclusionOptions(include_pilots=True)).scored
    assert set(with_pilots["observer"]) == {"h1", "sim"} and set(with_pilots["observer_kind"]) == {"human"}
    with ResponseStore(path) as store:
        exclusions.record(store.conn, "exp", "sim", True, "pressed keys at random", "admin")
    counted = apply_exclusions(load_responses(path), ExclusionOptions(include_pilots=True))
    assert set(counted.scored["observer"]) == {"h1"}
    assert set(counted.log.loc[counted.log["observer"] == "sim", "observer_kind"]) == {"pilot"}
