"""Classification: one image, then a label from the label set (Burgert et al. 2025; Geirhos et al. 2019)."""

from __future__ import annotations

from ..words import say
from . import TrialTypeCard, answer_time, seconds


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
    how_to_answer = {"mouse": "classify_how_mouse", "keyboard": "classify_how_keyboard"}
    choice_rule = "16class-mean"

    def task_sentence(self, timing, facts, language):
        return say("classify_task", language, seconds=seconds(timing.stimulus, language),
                   masked=say("classify_masked", language) if timing.mask else "",
                   unsure=say("classify_unsure_not_clear" if facts["not_clear"] else "classify_unsure", language),
                   answer_time=answer_time(timing, "since_photograph", language))
