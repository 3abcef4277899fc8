"""The report's methods paragraph: each sentence against numbers worked out by hand, against the experiment it
describes and against what results.json recorded beside it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis.sections.methods import conditions_shown, display_sentence, stimuli_sentence, timing_sentence


def test_stimuli_sentence_names_each_condition_by_its_parameters_at_every_level():
    scored = pd.DataFrame({"condition": ["original", "patch_shuffle", "patch_shuffle", "patch_shuffle", "bilateral"],
                           "level": [None, 0, 4, 4, 4], "session": "1", "adaptive": None,
                           "params": ["{}", json.dumps({"grid": 2}), json.dumps({"grid": 6}), json.dumps({"grid": 6}),
                                      json.dumps({"d": 12, "sigma_color": 170})]})
    assert stimuli_sentence(conditions_shown(scored)) == (
        "Stimuli came in 3 condition(s): bilateral (d 12, sigma_color 170); original; patch shuffle (grid 2, 6).")
    # an adaptive block's levels follow the answers: the sentence names the fixed levels only
    visited = scored.assign(session=["1", "1", "1", "adaptive-patch_shuffle", "1"])
    assert "patch shuffle (grid 2)" in stimuli_sentence(conditions_shown(visited.iloc[[0, 1, 3, 4]]))


def test_timing_sentence_gives_planned_ms_frames_refresh_and_the_measured_duration():
    planned = json.dumps({"fixation": 300, "stimulus": 200, "mask": 200, "response_window": None, "iti": 500})
    frames = json.dumps({"fixation": 18, "stimulus": 12, "mask": 12})
    humans = pd.DataFrame({"timing_planned": [planned, planned], "frames": [frames, frames], "refresh_hz": [60.0, 60.0],
                           "timing_measured": [json.dumps({"stimulus": 199.0}), json.dumps({"stimulus": 201.0})]})
    # SD of 199 and 201 (ddof 1) = sqrt(2) = 1.41
    assert timing_sentence(humans) == ("Each trial showed fixation 300 ms (18 frames), stimulus 200 ms (12 frames), "
                                       "mask 200 ms (12 frames), no response deadline, inter-trial interval 500 ms on "
                                       "displays refreshing at 60 Hz; the measured stimulus duration was 200.0 ms on "
                                       "average (SD 1.4 ms, 2 trials).")
    windowed = humans.assign(timing_planned=json.dumps({"stimulus": 200, "response_window": 2000}))
    assert timing_sentence(windowed).startswith("Each trial showed stimulus 200 ms (12 frames), response window "
                                                "2000 ms on")


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


def test_a_card_slider_never_moved_is_reported_as_not_measured():
    """The server records ``card_moved`` with each browser trial; a person who left the slider where it started has
    the browser's default pixels per mm, which the sentence must not report as a measure."""
    moved = {"stimulus_degrees": 5, "px_per_mm": 4.2, "viewing_distance_cm": 60, "stimulus_css_px": 250.0,
             "card_moved": True}
    unmoved = {"stimulus_degrees": 5, "px_per_mm": 3.78, "viewing_distance_cm": 50, "stimulus_css_px": 210.0,
               "card_moved": False}
    both = pd.DataFrame({"observer": ["w1", "w2"], "device": [json.dumps(moved), json.dumps(unmoved)]})
    # the median px/mm over the one person who matched the card: 4.20; distance and image size over both people
    assert display_sentence(both) == (
        "Images were 5 degrees of visual angle wide, in the browser after a screen calibration with a credit card "
        "(median 4.20 px/mm, not measured for 1 person who left the card slider unmoved, entered viewing distance "
        "median 55 cm, images 230 CSS px; 2 people).")
    nobody = both.assign(device=[json.dumps(unmoved)] * 2)
    assert display_sentence(nobody) == (
        "Images were 5 degrees of visual angle wide, in the browser with the card calibration not measured (nobody "
        "moved the card slider, so the browser's default 3.78 px/mm stood; entered viewing distance median 50 cm, "
        "images 210 CSS px; 2 people).")


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
    and a page left): 30 trials of people (the model's 16 are not people's trials); p3 answered the attention
    check wrong and leaves entirely. t-tests: the human-minus-model item differences vary in each of original and
    blur 1, 2, 4 (4 tests, 4 items each). The statistics of other sections (psychometric fits, error consistency,
    ceilings, ranks) enter through the method each of them records, checked sentence by sentence below."""
    from analysis.report import AnalysisOptions, write_report
    from cuebench.responses import ResponseStore

    with ResponseStore(tmp_path / "small.sqlite") as store:
        store.write_many(small_study())
    write_report([tmp_path / "small.sqlite"], tmp_path / "report", options=AnalysisOptions(n_choices=2, n_boot=20),
                 progress=False)
    text = pd.read_csv(tmp_path / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert text.startswith(
        "Stimuli came in 2 condition(s): blur (sigma 1, 2, 4); original. "
        "Each trial showed fixation 300 ms, stimulus 200 ms, mask 200 ms. "
        "2 participants were analysed; excluded entirely: 1 participant failed 1 attention check(s) (allowed 0). "
        "Of the analysed observers' test trials, 2 were excluded: 1 left the page or window during the trial, "
        "1 timeout (no answer). "
        "1 model(s) answered the same trials: m1 (decision rule 16class-mean). "
        "Accuracy was scored over 30 test trials of people with C = 2 answer choices (chance 1/C; C as given (the "
        "--n-choices option)); each observer's accuracy per condition and level carries a Wilson 95 % interval, and the mean over the observers of a kind "
        "a percentile bootstrap interval (20 resamples of the observers). ")
    assert ("Each model was compared with the people by 4 two-sided paired t-test(s), one per model, condition and "
            "level, paired by item (each image x condition trial: the people's mean correctness on it against the "
            "model's) (4 pairs per test), with holm correction over all 4 tests at alpha 0.05; effect sizes are d_z "
            "= t / sqrt(n)") in text
    assert_sentences_are_recorded(text, results)


def recorded_sentences(results: dict) -> dict[str, str]:
    """Section -> the method sentence it recorded in results.json's summary."""
    return {name: entry["method"]["sentence"] for name, entry in results["summary"].items()
            if isinstance(entry, dict) and isinstance(entry.get("method"), dict) and entry["method"].get("sentence")}


def assert_sentences_are_recorded(text: str, results: dict) -> None:
    """Each section's recorded sentence is in the paragraph once, and its numbers are the ones recorded beside it
    and the ones the results tables hold (t-tests run, bootstrap resamples)."""
    recorded = recorded_sentences(results)
    for name, sentence in recorded.items():
        assert text.count(sentence) == 1, name
    tables = results["tables"]
    tests = [row for row in tables.get("ttests", []) if row["p"] is not None]
    if tests:
        method = results["summary"]["ttests"]["method"]
        assert method["tests"] == len(tests) and f"by {len(tests)} two-sided paired" in recorded["ttests"]
        assert method["pairs_min"] == min(row["n"] for row in tests)
        assert {row["correction"] for row in tests} == {method["correction"]}
    for name in ("accuracy", "reliance"):
        if name in recorded and results["summary"][name]["method"]["bootstrap_intervals"]:
            n_boot = results["summary"][name]["method"]["bootstrap_resamples"]
            assert f"({n_boot} resamples of the observers)" in recorded[name]
    people = [row for row in tables["accuracy"] if row["observer_kind"] == "human"]
    assert f"scored over {sum(row['n'] for row in people)} test trials of people" in recorded["accuracy"]


def test_people_screened_out_before_their_first_trial_are_in_the_participants_sentence(tmp_path):
    """The exclusion log of an experiment names a person who left no answer (the browser check screened them
    out): the report's paragraph counts them."""
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
        for _ in range(2):  # what `cuebench withdraw` leaves of two people: the count
            exclusions.record_withdrawal(store.conn, experiment.name)
    write_report([out], tmp_path / "report", options=AnalysisOptions(n_boot=20), progress=False)
    text = pd.read_csv(tmp_path / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    assert ("1 participant was analysed; excluded entirely: 1 screened out by the browser check; 2 people withdrew "
            "after taking part and their data were erased.") in text
    recorded = json.loads((tmp_path / "report" / "results.json").read_text())["summary"]["participants"]["method"]
    assert (recorded["analysed"], recorded["excluded"], recorded["withdrawals"]) == (1, 1, 2)
    assert "1 model(s) answered the same trials: lite0 (decision rule not recorded)." in text


PEOPLE = {"P01": 0, "P02": 1, "P03": 2, "P04": 3, "P05": 4, "P06": 0}
"""Six people over the five Latin-square groups of the human grid; P06 is excluded by the experimenter."""


def pilot_experiment(root):
    """The human grid of the suppression design (8 photos, 5 arms) with 6 people who answer by a seeded coin whose
    odds fall with suppression, and one model that answers every trial: a small stand-in for the demo's report
    with people (the demo itself has only models)."""
    from cuebench import exclusions
    from cuebench_app.cli import main
    from cuebench.counterbalance import participant_sequence
    from cuebench.expdir import ExperimentDir
    from cuebench.responses import ResponseStore, trial_row

    out = root / "pilot"
    assert main(["stimuli", "build", "--design", "suppression", "--grid", "human", "--images", "default",
                 "--out", str(out), "--workers", "1"]) == 0
    experiment = ExperimentDir(out).load()
    rng, rows = np.random.default_rng(5), []
    for person, group in PEOPLE.items():
        for step in participant_sequence(experiment, group, person):
            trial = experiment.trial(step.trial_id)
            p_right = 0.9 if trial.condition == "original" else 0.6
            right = trial.role == "attention" or rng.random() < p_right
            wrong = next(c for c in trial.choices if c != trial.correct)
            rows.append(trial_row(experiment, trial, observer=person, observer_kind="human", session=1,
                                  trial_index=step.index, response=trial.correct if right else wrong, rt_ms=650.0,
                                  group=group, device={"user_agent": "test browser"}))
    rows += [trial_row(experiment, t, observer="tiny-net", observer_kind="model", session=1, trial_index=i,
                       response=t.correct if i % 3 else "not clear", decision_rule="16class-mean")
             for i, t in enumerate(experiment.trials) if t.role == "test"]
    with ResponseStore(ExperimentDir(out).responses_file) as store:
        store.write_many(rows)
        exclusions.record(store.conn, experiment.name, "P06", True, "looked away often", "cli (root)")
    return out, experiment


@pytest.mark.slow
def test_report_and_analyze_give_one_paragraph_that_matches_the_experiment_and_results(tmp_path):
    """``cuebench report`` and ``cuebench analyze --metric methods`` (run as the user does, from the folder with
    relative paths) print the same paragraph; its design sentences say what experiment.json holds (counted here
    from the experiment, not by the code under test), the experimenter's note stays in the exclusion log, and every
    section's sentence is the one results.json recorded."""
    out, experiment = pilot_experiment(tmp_path)
    env_run = dict(cwd=tmp_path, capture_output=True, text=True, timeout=600)
    done = subprocess.run([sys.executable, "-m", "cuebench", "report", "pilot", "--out", "report", "--n-boot", "50"],
                          **env_run)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-m", "cuebench", "analyze", "pilot", "--metric", "methods", "--n-boot",
                           "50", "--out", "methods.csv"], **env_run)
    assert done.returncode == 0, done.stderr
    text = pd.read_csv(tmp_path / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    assert pd.read_csv(tmp_path / "methods.csv")["paragraph"].iloc[0] == text
    results = json.loads((tmp_path / "report" / "results.json").read_text())

    tests = [t for t in experiment.trials if t.role == "test"]
    photos, arms = {t.source_image for t in tests}, {(t.condition, t.level) for t in tests}
    attention = sum(t.role == "attention" for t in experiment.trials)
    assert (f"The suppression experiment showed {len(photos)} photo(s); people answered with the "
            f"{len(experiment.label_set.labels)} class labels in alphabetical order plus 'not clear'.") in text
    assert (f"Besides its {len(tests)} fixed-level test trials the experiment held {attention} attention trial(s) (an "
            f"attention check every 100 trials, a break every 100 trials)") in text
    assert (f"Conditions rotated over {len(experiment.assignment.groups)} participant groups as a Latin square: each "
            f"person saw each of the {len(photos)} photos once, in one of {len(arms)} condition x level arms.") in text
    assert "patch shuffle (grid 3, 6)" in text and "bilateral (d 12, sigma_color 170, sigma_space 75)" in text
    assert ("Each trial showed fixation 300 ms, stimulus 200 ms, mask 200 ms, no response deadline, inter-trial "
            "interval 500 ms.") in text
    assert ("5 participants were analysed (5 in the browser); excluded entirely: 1 excluded by the experimenter "
            "(reason in the exclusion log).") in text
    assert "looked away" not in text and "root" not in text
    assert "1 model(s) answered the same trials: tiny-net (decision rule 16class-mean)." in text
    assert_sentences_are_recorded(text, results)
    # every sentence is accounted for: the design and runner sentences above, or a section's recorded one
    recorded = " ".join(recorded_sentences(results).values())
    fixed = ("The suppression experiment", "Besides its", "Conditions rotated", "Stimuli came", "Each trial showed",
             "5 participants", "1 model(s)", "Of the analysed")
    for sentence in re.split(r"(?<=\.) (?=[A-Z0-9])", text):
        assert sentence.startswith(fixed) or sentence in recorded, sentence
    ttests = pd.read_csv(tmp_path / "report" / "tables" / "ttests.csv")
    assert set(ttests.dropna(subset=["p"])["parameters"]) >= {"grid 3", "grid 6"}


def test_the_methods_name_the_language_of_a_study_not_in_english():
    """A German study's design sentences end with the language participants read; an English one's say nothing."""
    from analysis.design_record import experiment_record
    from analysis.sections.methods import design_sentences
    from cuebench.trials import Experiment, LabelSet

    english = Experiment(name="x", design="suppression", label_set=LabelSet("s", ("a", "b")), stimuli={}, trials=[])
    assert "language" not in experiment_record(english)
    german = design_sentences(experiment_record(english.model_copy(update={"language": "de"})))
    assert german[-1] == "Participants read the study in German: its texts and every screen of the task."
    assert not any("German" in s for s in design_sentences(experiment_record(english)))


def test_the_methods_say_what_the_answer_buttons_showed():
    """A German study of the labels cat and dog whose buttons said "Katze" and "Hund" says so, in the grid's order
    (German: Hund before Katze); one whose buttons showed the labels themselves says that instead."""
    from analysis.design_record import experiment_record
    from analysis.sections.methods import design_sentences
    from cuebench.trials import Experiment, LabelSet, Stimulus, Trial

    stimulus = Stimulus(id="s1", path="stimuli/s1.png")
    trial = Trial("t1", "classify", "test", ("s1",), ("cat", "dog", "not clear"), "cat", condition="original")

    def study(shown: dict) -> Experiment:
        return Experiment(name="x", design="labelled-set", language="de", stimuli={"s1": stimulus}, trials=[trial],
                          label_set=LabelSet("s", ("cat", "dog"), shown=shown))

    named = design_sentences(experiment_record(study({"cat": "Katze", "dog": "Hund"})))
    assert named[-1] == ("The answer buttons named the classes in German (Hund for dog, Katze for cat); answers are "
                         "reported under the labels.")
    assert design_sentences(experiment_record(study({})))[-1] == \
        "The answer buttons showed the class labels themselves (cat, dog)."
