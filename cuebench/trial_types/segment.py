"""Segmentation: a class for every pixel, models only (Heinert et al.)."""

from __future__ import annotations

from . import TrialTypeCard

SEGMENT_ANSWER = "label map"
"""The one choice of a ``segment`` trial: the answer is a label map, scored pixel by pixel."""


class Segment(TrialTypeCard):
    """Segmentation: the answer is a class for every pixel, scored against the trial's label mask."""

    name = "segment"
    answers = (SEGMENT_ANSWER,)
    response = None
    choice_rule = "confusion"
    right_or_wrong = False

    def check(self, trial):
        if trial.label_mask is None or trial.choices != self.answers:
            return "label_mask", f"a segment trial needs its label mask and the one choice {SEGMENT_ANSWER!r}"
        return None

    def references(self, trial):
        return (trial.label_mask,)

    def n_choices(self, choices):
        """No chance level: the one choice is a label map, scored pixel by pixel (mIoU), not right or wrong."""
        return None
