"""The PsychoPy-style CSV written beside lab sessions (and by the web admin export)."""

import pandas as pd

from human_tasks.psychopy_csv import psychopy_date, write_psychopy_csv
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore, trial_row
from cuebench.trials import Experiment, LabelSet, Timing, Trial


def _experiment(root, photos):
    expdir = ExperimentDir(root)
    cat = expdir.write_stimulus(photos["chelsea"], {"source_image": "chelsea", "transform": "original"})
    rocket = expdir.write_stimulus(photos["rocket"], {"source_image": "rocket", "transform": "original"})
    labels = ("cat", "rocket")
    trials = [
        Trial("t-cat", "classify", "test", (cat.id,), labels, "cat", source_image="chelsea", category="cat"),
        Trial("t-odd", "oddity", "catch", (cat.id, cat.id, rocket.id), ("1", "2", "3"), "3",
              timing=Timing(fixation=500, stimulus=800, mask=None, response_window=2000, response_from_onset=True)),
    ]
    return Experiment("csvtest", "test", LabelSet("two", labels), {cat.id: cat, rocket.id: rocket}, trials)


def test_rows_become_psychopy_columns_with_rt_in_seconds(tmp_path, photos):
    exp = _experiment(tmp_path / "exp", photos)
    store = ResponseStore(tmp_path / "exp" / "responses.sqlite")
    common = dict(observer_kind="human", refresh_hz=60.0, device={"psychopy": "2026.2.5"}, group=1)
    store.write_many([
        # stored out of order, and a second participant: the file sorts by participant, session, index
        trial_row(exp, exp.trials[1], observer="P02", session=1, trial_index=1, response=None, rt_ms=None,
                  timed_out=1, timing_measured={"fixation": 500.2, "stimulus": 801.0}, frames={"fixation": 30,
                  "stimulus": 48}, dropped_frames=0, created_at="2026-11-21T09:30:05.250+00:00", **common),
        trial_row(exp, exp.trials[0], observer="P02", session=1, trial_index=0, response="rocket", rt_ms=734.5,
                  timed_out=0, timing_measured={"fixation": 300.1, "stimulus": 199.8, "mask": 200.4},
                  frames={"fixation": 18, "stimulus": 12, "mask": 12}, dropped_frames=2,
                  created_at="2026-11-21T09:30:01.007+00:00", **common),
        trial_row(exp, exp.trials[0], observer="P01", session=2, trial_index=0, response="cat", rt_ms=512.0,
                  timed_out=0, dropped_frames=0, created_at="2026-11-20T14:02:03.456+00:00", **common),
    ])
    out = write_psychopy_csv(store.rows(), tmp_path / "data" / "all.csv")
    df = pd.read_csv(out)
    assert list(df["participant"]) == ["P01", "P02", "P02"]
    assert list(df["trials.thisN"]) == [0, 0, 1]
    assert list(df["key_resp.rt"].round(4)[:2]) == [0.512, 0.7345]
    assert pd.isna(df.loc[2, "key_resp.rt"]) and pd.isna(df.loc[2, "key_resp.keys"])  # "None": no answer
    assert list(df["key_resp.keys"][:2]) == ["cat", "rocket"]
    assert list(df["key_resp.corr"]) == [1, 0, 0]
    assert df.loc[1, "stimulus.duration_ms"] == 199.8 and df.loc[1, "mask.frames"] == 12
    assert list(df["dropped_frames"]) == [0, 2, 0]
    assert list(df["date"]) == ["2026-11-20_14h02.03.456", "2026-11-21_09h30.01.007", "2026-11-21_09h30.01.007"]
    assert set(df["expName"]) == {"csvtest"} and set(df["frameRate"]) == {60.0}
    assert set(df["psychopyVersion"]) == {"2026.2.5"}
    assert list(df["session"]) == [2, 1, 1]
    assert list(df["role"]) == ["test", "test", "catch"]


def test_dates_follow_psychopy_getdatestr():
    assert psychopy_date("2026-01-02T03:04:05.678901+00:00") == "2026-01-02_03h04.05.678"
    assert psychopy_date(None) == ""


def test_empty_rows_write_only_the_header(tmp_path):
    out = write_psychopy_csv([], tmp_path / "empty.csv")
    df = pd.read_csv(out)
    assert df.empty and "key_resp.keys" in df.columns and "trials.thisN" in df.columns
