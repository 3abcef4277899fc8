"""The study's texts: per-design defaults in the experiment folder, kept when edited, rendered safely."""

from __future__ import annotations

import math

import pytest

from cuebench.counterbalance import participant_sequence
from cuebench.expdir import ExperimentDir
from cuebench.texts import (TextsContradictError, check_texts, contradictions, default_texts, refresh_texts, to_html,
                            stale_warning, study_facts, text_path, write_default_texts)
from stimuli.designs import DESIGNS
from stimuli.web_sample import build_sample_experiment


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("texts") / "exp"
    return root, build_sample_experiment(root)


def only(experiment, keep, **timing):
    """The experiment with the trials ``keep`` selects, ``timing`` changed on each, no groups, no breaks."""
    trials = [t.model_copy(update={"timing": t.timing.model_copy(update=timing)}) for t in experiment.trials if keep(t)]
    return experiment.model_copy(update={"trials": trials, "assignment": None,
                                         "schedule": experiment.schedule.model_copy(update={"break_every": None})})


def test_defaults_describe_this_experiment(sample):
    _, experiment = sample
    sequence = [experiment.trial(s.trial_id) for s in participant_sequence(experiment, 0, "texts")]
    # by hand: classify 300 fixation + 200 image + 200 mask + 1500 answer + 500 ITI = 2700 ms;
    # DiST oddity 300 fixation + 2000 answer window from onset (covers the 800 ms triplet) + 500 ITI = 2800 ms
    ms = sum(2700 if t.trial_type == "classify" else 2800 for t in sequence)
    breaks = sum(s.break_before for s in participant_sequence(experiment, 0, "texts"))
    facts = study_facts(experiment)
    assert facts["trials"] == len(sequence) and facts["breaks"] == breaks > 0
    assert facts["minutes"] == math.ceil(ms / 60000 + 3 + 0.5 * breaks)
    assert facts["practice"] == 1 and set(facts["types"]) == {"classify", "oddity"} and facts["attention"]
    instructions = default_texts(experiment)["instructions"]
    assert f"**{len(sequence)} trials** (practice included)" in instructions
    assert "The first trial is practice." in instructions
    assert "a photograph appears for 0.2 seconds and is then covered by noise" in instructions
    assert "There is no time limit for the answer." in instructions  # the sample's classification trials
    assert ". In other trials, three images appear side by side for 0.8 seconds" in instructions
    assert "You have 2 seconds to answer, counted from the moment the images appear" in instructions
    assert "press **1**, **2** or **3**" in instructions.lower() and "click the label" in instructions
    assert "The practice trials tell you whether your answer was right; the other trials give no feedback." \
        in instructions and "There is no feedback" not in instructions


def test_a_classification_study_without_practice_mask_or_breaks_says_so(sample):
    _, experiment = sample
    tests_only = only(experiment, lambda t: t.trial_type == "classify" and t.role == "test", mask=None,
                      response_window=3000)
    text = default_texts(tests_only)["instructions"]
    assert "There is no practice part." in text and "There are no breaks" in text and "There is no feedback." in text
    assert "noise" not in text and "A photograph appears for 0.2 seconds; then you click the label" in text
    assert "You have 3 seconds to answer, counted once the answer screen appears" in text
    assert "different" not in text and f"**{len(tests_only.trials)} trials**" in text
    hidden = tests_only.model_copy(update={"label_set": tests_only.label_set.model_copy(update={"not_clear": False})})
    assert "not clear" in text and "not clear" not in default_texts(hidden)["instructions"]


def test_a_dist_study_asks_for_the_image_that_differs(sample):
    """Wen et al. 2024, A.4: "Find the image that is different from the other two", keys 1-3, the
    triplet 800 ms and 2 s from its onset to answer; which image is the original is never said (the
    catch trials are there so that people look for the different one, not for the original)."""
    _, experiment = sample
    text = default_texts(only(experiment, lambda t: t.trial_type == "oddity"))["instructions"]
    assert "Three images appear side by side for 0.8 seconds: two of them are alike and one is different from the " \
           "other two. Press **1**, **2** or **3** (left, middle, right) for the one that is different." in text
    assert "You have 2 seconds to answer, counted from the moment the images appear" in text
    assert not any(word in text for word in ("noise", "label", "layout", "original", "photograph"))


def test_the_debrief_says_what_this_design_changed(sample):
    """The debrief is read after the last trial, so it may say what the instructions must not: which
    cue each design took away or put in conflict."""
    _, experiment = sample
    as_design = {name: experiment.model_copy(update={"design": name}) for name in DESIGNS.names()}
    texts = {name: default_texts(e)["debrief"] for name, e in as_design.items()}
    assert "global structure" in texts["dist"] and "shape of one object with the texture of another" in \
        texts["cue-conflict-import"] and "noise, blur" in texts["corruptions"]
    assert len(set(texts.values())) >= 6, "designs that change different cues share a debrief"
    suppression = only(experiment, lambda t: t.trial_type == "classify" and t.role == "test")
    trials = [t.model_copy(update={"condition": c}) for t, c in zip(suppression.trials, ["grayscale", "patch_shuffle"])]
    text = default_texts(suppression.model_copy(update={"design": "suppression", "trials": trials}))["debrief"]
    assert "Some photographs were shown unchanged; in others colour was taken away; in others the image was cut " \
           "into tiles that were shuffled" in text


def test_a_rebuild_rewrites_unedited_defaults_and_names_the_lines_of_edited_texts_that_contradict_it(sample, tmp_path):
    """After a rebuild with a response window and no practice, an unedited instructions.md is rewritten; an
    edited consent.md that still says "no time limit" is kept, and the runners' check names its lines."""
    root, experiment = sample
    folder = ExperimentDir(tmp_path / "exp")
    assert set(refresh_texts(folder, experiment).values()) == {"written"}
    assert refresh_texts(folder, experiment) == {} and contradictions(folder, experiment) == []
    classify = only(experiment, lambda t: t.trial_type == "classify" and t.role == "test", response_window=2000)
    consent = text_path(folder, "consent")
    consent.write_text(consent.read_text() + "\nEthics approval E-42. There is no time limit, and there are "
                                             "12 trials.\n")
    edited = consent.read_text()
    assert refresh_texts(folder, classify) == {"consent": "edited", "instructions": "rewritten", "debrief": "rewritten"}
    assert consent.read_text() == edited  # an edited text is never overwritten
    instructions = text_path(folder, "instructions").read_text()
    assert "You have 2 seconds to answer" in instructions and "There is no practice part." in instructions
    assert refresh_texts(folder, classify) == {}  # told once, by the build that changed them
    line = stale_warning(folder, {"consent": "edited", "instructions": "rewritten"})
    assert "\n" not in line and "rewrote instructions.md" in line and "your edited consent.md" in line
    n = len(edited.splitlines())
    trials = study_facts(classify)["trials"]
    assert contradictions(folder, classify) == [  # the old default's sentence on line 3, and the edit
        'texts/consent.md:3: "no time limit", but the answer must come within 2 seconds',
        f'texts/consent.md:{n}: "12 trials", but a participant answers {trials}',
        f'texts/consent.md:{n}: "no time limit", but the answer must come within 2 seconds']
    with pytest.raises(TextsContradictError, match="--allow-text-mismatch"):
        check_texts(folder, classify)


def test_edited_texts_are_kept_and_rendered_with_html_escaped(sample):
    root, experiment = sample
    folder = ExperimentDir(root)
    assert {p.name for p in write_default_texts(folder, experiment)} <= {
        "consent.md", "instructions.md", "debrief.md", "completion.md", "closed.md", "time_up.md", "ended_early.md"}
    text_path(folder, "consent").write_text("# Our lab\n\nEthics approval **E-42**. <script>alert(1)</script>\n")
    assert write_default_texts(folder, experiment) == []  # nothing overwritten
    html = to_html(text_path(folder, "consent").read_text(encoding="utf-8"))
    assert "<h1>Our lab</h1>" in html and "<strong>E-42</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_german_study_gets_german_defaults_in_texts_de_and_its_stale_texts_are_caught(sample, tmp_path):
    """``language: de``: the defaults are written, in German, to texts/de/ beside the English folder's files
    (which stay as they are); an unedited German text is rewritten after a rebuild, an edited one that still
    claims "kein Zeitlimit" and a wrong trial count is named by line."""
    _, experiment = sample
    folder = ExperimentDir(tmp_path / "exp")
    english = text_path(folder, "consent")
    english.parent.mkdir(parents=True)
    english.write_text("# Welcome\n")
    german = experiment.model_copy(update={"language": "de"})
    assert set(refresh_texts(folder, german).values()) == {"written"}
    consent = text_path(folder, "consent", "de")
    assert consent == tmp_path / "exp" / "texts" / "de" / "consent.md" and english.read_text() == "# Welcome\n"
    assert consent.read_text().startswith("# Willkommen") and "0,2 Sekunden" in consent.read_text()
    assert contradictions(folder, german) == []
    consent.write_text(consent.read_text() + "\nEs gibt kein Zeitlimit und 12 Durchgänge; die ersten 3 Durchgänge "
                                             "sind Übung.\n")
    n = len(consent.read_text().splitlines())
    classify = only(german, lambda t: t.trial_type == "classify" and t.role == "test", response_window=2000)
    assert refresh_texts(folder, classify)["instructions"] == "rewritten"
    instructions = text_path(folder, "instructions", "de").read_text()
    assert "Sie haben 2 Sekunden Zeit zum Antworten" in instructions and "Es gibt keinen Übungsteil." in instructions
    trials = study_facts(classify)["trials"]
    assert contradictions(folder, classify) == [
        'texts/de/consent.md:3: "kein Zeitlimit", but the answer must come within 2 seconds',
        f'texts/de/consent.md:{n}: "ersten 3 Durchgänge sind Übung", but the experiment has 0 practice trials',
        f'texts/de/consent.md:{n}: "12 Durchgänge", but a participant answers {trials}',
        f'texts/de/consent.md:{n}: "kein Zeitlimit", but the answer must come within 2 seconds']
    with pytest.raises(TextsContradictError, match=r"exp/texts/de/ contradicts"):
        check_texts(folder, classify)
