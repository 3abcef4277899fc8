"""The study's texts: per-design defaults in the experiment folder, kept when edited, rendered safely."""

from __future__ import annotations

import math

import pytest

from cuebench.design import participant_sequence
from cuebench.expdir import ExperimentDir
from cuebench.texts import default_texts, render, study_facts, text_path, write_default_texts
from stimuli.web_sample import build_sample_experiment


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("texts") / "exp"
    return root, build_sample_experiment(root)


def test_defaults_describe_this_experiment(sample):
    _, experiment = sample
    sequence = [experiment.trial(s.trial_id) for s in participant_sequence(experiment, 0, "texts")]
    # by hand: classify 300 fixation + 200 image + 200 mask + 1500 answer + 500 ITI = 2700 ms;
    # DiST oddity 500 fixation + 2000 answer window from onset (covers the 800 ms triplet) + 500 ITI = 3000 ms
    ms = sum(2700 if t.trial_type == "classify" else 3000 for t in sequence)
    breaks = sum(s.break_before for s in participant_sequence(experiment, 0, "texts"))
    facts = study_facts(experiment)
    assert facts["trials"] == len(sequence) and facts["breaks"] == breaks > 0
    assert facts["minutes"] == math.ceil(ms / 60000 + 3 + 0.5 * breaks)
    assert facts["practice"] and facts["oddity"] and facts["classify"] and facts["attention"]
    instructions = default_texts(experiment)["instructions"]
    assert f"**{len(sequence)} trials** (practice included)" in instructions
    assert "practice trials come first" in instructions and ". In other trials, three images" in instructions
    assert "press **1**, **2** or **3**" in instructions and "click the label" in instructions


def test_a_classification_study_without_practice_or_breaks_says_so(sample):
    _, experiment = sample
    tests_only = experiment.model_copy(update={
        "trials": [t for t in experiment.trials if t.trial_type == "classify" and t.role == "test"],
        "schedule": experiment.schedule.model_copy(update={"break_every": None}), "assignment": None})
    text = default_texts(tests_only)["instructions"]
    assert "There is no practice part." in text and "There are no breaks" in text
    assert "odd one" not in text and f"**{len(tests_only.trials)} trials**" in text


def test_edited_texts_are_kept_and_rendered_with_html_escaped(sample):
    root, experiment = sample
    folder = ExperimentDir(root)
    assert {p.name for p in write_default_texts(folder, experiment)} <= {"consent.md", "instructions.md",
                                                                         "debrief.md", "completion.md"}
    text_path(folder, "consent").write_text("# Our lab\n\nEthics approval **E-42**. <script>alert(1)</script>\n")
    assert write_default_texts(folder, experiment) == []  # nothing overwritten
    html = render(folder, "consent")
    assert "<h1>Our lab</h1>" in html and "<strong>E-42</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
