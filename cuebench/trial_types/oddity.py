"""Oddity: pick the odd one of k images shown side by side (DiST, Wen et al. 2024)."""

from __future__ import annotations

from ..words import say
from . import TrialTypeCard, answer_time, seconds


class Oddity(TrialTypeCard):
    """The trial's images side by side; the answer is the position (1..k, from the left) of the odd one."""

    name = "oddity"
    images = "row"
    numbered = True
    answers = "positions"
    response = "keys"
    masked = False
    timing = {"fixation": 300, "stimulus": 800, "mask": None, "response_window": 2000, "iti": 500,
              "response_from_onset": True}
    """Wen et al. 2024 (DiST, App. A.4): the triplet appears after a 300 ms delay (the fixation), stays 800 ms,
    and is answered within 2000 ms of its onset."""
    prompt = "oddity_prompt"
    choice_rule = "oddity"

    def task_sentence(self, timing, facts, language):
        return say("oddity_task", language, seconds=seconds(timing.stimulus, language),
                   answer_time=answer_time(timing, "since_images", language))
