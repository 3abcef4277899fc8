"""The report's methods paragraph: each sentence against numbers worked out by hand."""

from __future__ import annotations

import json

import pandas as pd

from analysis.sections.methods import display_sentence, stimuli_sentence, timing_sentence


def test_stimuli_sentence_names_each_condition_and_the_range_of_its_parameter():
    scored = pd.DataFrame({"condition": ["original", "patch_shuffle", "patch_shuffle", "patch_shuffle"],
                           "level": [None, 0, 4, 4],
                           "params": ["{}", json.dumps({"grid": 2}), json.dumps({"grid": 6}), json.dumps({"grid": 6})]})
    assert stimuli_sentence(scored) == "Stimuli came in 2 condition(s): original; patch shuffle (2 levels; grid 2 to 6)."


def test_timing_sentence_gives_planned_ms_frames_refresh_and_the_measured_duration():
    planned = json.dumps({"fixation": 300, "stimulus": 200, "mask": 200})
    frames = json.dumps({"fixation": 18, "stimulus": 12, "mask": 12})
    humans = pd.DataFrame({"timing_planned": [planned, planned], "frames": [frames, frames], "refresh_hz": [60.0, 60.0],
                           "timing_measured": [json.dumps({"stimulus": 199.0}), json.dumps({"stimulus": 201.0})]})
    # SD of 199 and 201 (ddof 1) = sqrt(2) = 1.41
    assert timing_sentence(humans) == ("Each trial showed fixation 300 ms (18 frames), stimulus 200 ms (12 frames), "
                                       "mask 200 ms (12 frames) on displays refreshing at 60 Hz; the measured stimulus "
                                       "duration was 200.0 ms on average (SD 1.4 ms, 2 trials).")


def test_display_sentence_reports_the_lab_geometry_and_the_web_calibration():
    lab = {"stimulus_degrees": 5, "viewing_distance_cm": 57, "screen_width_cm": 30, "stimulus_px": 298}
    web_a = {"stimulus_degrees": 5, "px_per_mm": 3.78, "viewing_distance_cm": 60, "stimulus_css_px": 250.0}
    web_b = {"stimulus_degrees": 5, "px_per_mm": 4.0, "viewing_distance_cm": 50, "stimulus_css_px": 210.0}
    humans = pd.DataFrame({"observer": ["lab1", "lab1", "web1", "web2", "web2"],
                           "device": [json.dumps(d) for d in (lab, lab, web_a, web_b, web_b)]})
    # medians over people, not trials: px/mm (3.78 + 4.0) / 2 = 3.89, distance 55 cm, images 230 px
    assert display_sentence(humans) == (
        "Images were 5 degrees of visual angle wide, in the lab at 57 cm from a 30 cm wide screen (298 px; 1 person) "
        "and in the browser after a screen calibration with a credit card (median 3.89 px/mm, entered viewing "
        "distance median 55 cm, images 230 CSS px; 2 people).")
    assert display_sentence(humans.assign(device=[json.dumps({"dpr": 1})] * 5)) is None
    measured = {**web_b, "distance_method": "blind-spot"}
    assert "distance median 55 cm, measured from the blind spot for 1 person and entered by 1, images" in \
        display_sentence(humans.assign(device=[json.dumps(d) for d in (lab, lab, web_a, measured, measured)]))
    assert "viewing distance measured from the blind spot, median 50 cm, images 210 CSS px; 1 person)" in \
        display_sentence(humans.assign(device=[json.dumps(d) for d in (lab, lab, measured, measured, measured)],
                                       observer=["lab1", "lab1", "web2", "web2", "web2"]))


CORRECTNESS = {  # observer -> condition -> right (1), wrong (0), left the page ("page") or timed out (None) per image
    "p1": {"original": [1, 1, 1, 1], 0: [1, 1, 1, 1], 1: [1, 0, 1, 0], 2: [0, 0, 0, 0]},
    "p2": {"original": [1, 1, 1, 0], 0: [1, 1, 1, 1], 1: [1, "page", 0, 0], 2: [0, None, 0, 0]},
    "m1": {"original": [1, 0, 1, 1], 0: [1, 0, 1, 0], 1: [0, 1, 1, 0], 2: [1, 0, 0, 1]},
    "p3": {"original": [1, 1, 1, 1], 0: [1, 1, 1, 1], 1: [1, 1, 1, 1], 2: [1, 1, 1, 1]},
}
SIGMA = {0: 1, 1: 2, 2: 4}
PLANNED = {"fixation": 300, "stimulus": 200, "mask": 200}


def small_study() -> list[dict]:
    """Two people analysed, one excluded for a failed attention check, one model; blur at three sigmas."""
    rows = []
    for observer, answers in CORRECTNESS.items():
        kind = "model" if observer.startswith("m") else "human"
        for key, outcomes in answers.items():
            condition, level = ("original", None) if key == "original" else ("blur", key)
            for image, outcome in enumerate(outcomes):
                category = ("cat", "dog")[image % 2]
                wrong = "dog" if category == "cat" else "cat"
                response = "" if outcome is None else category if outcome in (1, "page") else wrong
                rows.append({"experiment": "small", "observer": observer, "observer_kind": kind, "session": "1",
                             "trial_index": len(rows), "trial_id": f"{category}{image}--{condition}--{level}",
                             "role": "test", "trial_type": "classify", "condition": condition, "level": level,
                             "params": {} if level is None else {"sigma": SIGMA[level]}, "category": category,
                             "response": response, "correct_answer": category,
                             "correct": None if outcome is None else int(response == category),
                             "timed_out": int(outcome is None), "events": [{"type": "blur"}] if outcome == "page" else [],
                             "timing_planned": PLANNED if kind == "human" else None,
                             "decision_rule": "16class-mean" if kind == "model" else None,
                             "rt_ms": None if kind == "model" or outcome is None else 700.0})
        if kind == "human":
            rows.append({"experiment": "small", "observer": observer, "observer_kind": kind, "session": "1",
                         "trial_index": len(rows), "trial_id": "attention-001", "role": "attention",
                         "trial_type": "classify", "condition": "attention", "category": "cat",
                         "response": "cat" if observer == "p3" else "dog", "correct_answer": "dog",
                         "correct": int(observer != "p3"), "timing_planned": PLANNED, "rt_ms": 700.0})
    return rows


def test_the_whole_paragraph_of_a_small_study_by_hand(tmp_path):
    """Every number below is counted by hand from :data:`CORRECTNESS`: p1 16 and p2 14 scored trials (a timeout
    and a page left), the model 16: 46; p3 answered the attention check wrong and leaves entirely. Fits: p1, p2,
    the model and the pooled people (4); the model's 2/4, 2/4, 2/4 over sigma 1, 2, 4 has no trend (Cochran-
    Armitage T = sum x (k - n p) = 0), p1's 4, 2, 0 of 4 and p2's 4, 1, 0 of 4, 3, 3 fall (z = -2.78, -2.53).
    t-tests: the human-minus-model item differences vary in each of original and blur 1, 2, 4 (4 tests); rank
    blocks: the 4 condition x level cells, methods: the model and the people's mean."""
    from analysis.report import AnalysisOptions, write_report
    from cuebench.responses import ResponseStore

    with ResponseStore(tmp_path / "small.sqlite") as store:
        store.write_many(small_study())
    write_report([tmp_path / "small.sqlite"], tmp_path / "report", options=AnalysisOptions(n_choices=2, n_boot=20),
                 progress=False)
    text = pd.read_csv(tmp_path / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    assert text == (
        "Stimuli came in 2 condition(s): blur (3 levels; sigma 1 to 4); original. "
        "Each trial showed fixation 300 ms, stimulus 200 ms, mask 200 ms. "
        "2 participants were analysed; excluded entirely: 1 for participant failed 1 attention check(s) (allowed 0). "
        "Of the analysed observers' test trials, 2 were excluded: 1 left the page or window during the trial, "
        "1 timeout (no answer). "
        "1 model(s) answered the same trials: m1 (decision rule 16class-mean). "
        "Accuracy was scored over 46 test trials with C = 2 answer choices (chance 1/C); proportions carry Wilson "
        "95 % intervals. "
        "Statistics: psychometric functions fitted with psignifit (Schütt et al. 2016) to 4 observer x condition "
        "series (people also pooled), each only after a Cochran-Armitage trend test found accuracy falling with the "
        "level at p < 0.05 (1 left unfitted as flat); percentile bootstrap intervals (20 resamples) of means over "
        "observers and of error consistency over trials; leave-one-out and split-half noise ceilings (Nili et al. "
        "2014); 4 paired two-sided t-tests of people against each model per condition and level (pingouin; holm "
        "correction at alpha 0.05); a Friedman test with the Iman-Davenport correction and Nemenyi post-hoc "
        "comparisons (Demšar 2006) of 2 methods over 4 blocks.")


def test_people_screened_out_before_their_first_trial_are_in_the_participants_sentence(tmp_path):
    """The exclusion log of an experiment names a person who left no answer (the browser check screened them
    out): the report's paragraph counts them, written after the log is merged in."""
    from analysis.report import AnalysisOptions, write_report
    from cuebench import exclusions
    from cuebench_app.cli import main
    from cuebench.expdir import ExperimentDir
    from cuebench.responses import ResponseStore, trial_row

    out = tmp_path / "exp"
    assert main(["stimuli", "build", "--design", "suppression", "--grid", "human", "--images", "default",
                 "--out", str(out), "--workers", "1", "--attention", "0"]) == 0
    experiment = ExperimentDir(out).load()
    rows = [trial_row(experiment, t, observer=o, observer_kind=k, session=1, trial_index=i, response=t.correct,
                      rt_ms=600.0 if k == "human" else None)
            for o, k in (("P01", "human"), ("lite0", "model")) for i, t in enumerate(experiment.trials)]
    with ResponseStore(ExperimentDir(out).responses_file) as store:
        store.write_many(rows)
        exclusions.record(store.conn, experiment.name, "P02", True, "no WebGL", "browser-check")
    write_report([out], tmp_path / "report", options=AnalysisOptions(n_boot=20), progress=False)
    text = pd.read_csv(tmp_path / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    assert "1 participant was analysed; excluded entirely: 1 for excluded: browser-check: no WebGL." in text
    assert "1 model(s) answered the same trials: lite0 (decision rule not recorded)." in text
