"""Classification: one image, then a label from the label set (Burgert et al. 2025; Geirhos et al. 2019)."""

from __future__ import annotations

from . import TrialTypeCard, trial_type, answer_time, seconds


@trial_type
class Classify(TrialTypeCard):
    """One image, masked by pink noise, then the label of what it showed (n-alternative forced choice)."""

    name = "classify"
    images = "one"
    answers = "labels"
    response = "label-grid"
    masked = True
    timing = {"fixation": 300, "stimulus": 200, "mask": 200, "response_window": None, "iti": 500,
              "response_from_onset": False}
    """Burgert et al. 2025: fixation 300 ms, image 200 ms, pink-noise mask 200 ms."""
    how_to_answer = {"mouse": "Click the label of your answer. ",
                     "keyboard": "Press the key shown next to the label of your answer. "}
    choice_rule = "16class-mean"

    def task_sentence(self, timing, facts):
        masked = " and is then covered by noise" if timing.mask else ""
        unsure = "guess if you are unsure" + ("; choose \"not clear\" only if you saw nothing"
                                              if facts["not_clear"] else "")
        return (f"a photograph appears for {seconds(timing.stimulus)}{masked}; then you click the label of what it "
                f"showed ({unsure}). {answer_time(timing, 'the photograph appears')}")
