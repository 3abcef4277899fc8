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
