"""Pieces every design needs: label sets, provenance, attention trials, the finished experiment."""

from __future__ import annotations

import platform
import random
import sys

import numpy as np

from .. import __version__
from ..labels import IMAGENET16, IMAGENET16_NAME
from ..schema import NOT_CLEAR, CLASSIFY_TIMING, LabelSet, Schedule, Trial
from ..sources import DEFAULT_LABEL_INDICES, SourceImage


def label_set_for(sources: list[SourceImage], spec: str) -> LabelSet:
    """The answer labels: the 16 ImageNet entry-level classes when the images use them,
    the embedded default's labels (with their ImageNet indices), or the folder's classes."""
    categories = sorted({s.category for s in sources if s.category})
    if not categories:
        from ..build import BuildError

        raise BuildError(f"images from {spec!r} have no classes: use a folder with one sub-folder per class, "
                         "or a flat folder with --labels labels.csv (columns image,category)")
    if set(categories) <= set(IMAGENET16):
        return LabelSet(IMAGENET16_NAME, IMAGENET16)
    if spec == "default":
        return LabelSet("default", tuple(DEFAULT_LABEL_INDICES), imagenet_indices=dict(DEFAULT_LABEL_INDICES))
    return LabelSet("custom", tuple(categories))


def build_provenance(args, design: str) -> dict:
    """How the experiment was made: command, options, versions (no timestamp, so a rebuild
    with the same inputs writes the same experiment.json)."""
    import cv2
    import PIL

    options = {k: v for k, v in sorted(vars(args).items()) if k not in ("func",) and _jsonable(v)}
    return {
        "design": design,
        "command": "cuebench " + " ".join(sys.argv[1:]) if sys.argv and "cuebench" in sys.argv[0] else None,
        "options": options,
        "software": {"cuebench": __version__, "python": platform.python_version(), "numpy": np.__version__,
                     "pillow": PIL.__version__, "opencv": cv2.__version__},
    }


def _jsonable(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, tuple))


def attention_trials(label_set: LabelSet, originals: list[tuple[str, str, str]], count: int, seed: int) -> list[Trial]:
    """Burgert et al. 2025, appendix E.2: "you will see an A; click B". ``originals`` are
    (source image, stimulus id, category A); B is another label, chosen by seed. The image
    is an original photo of class A, so the check tests reading, not recognition."""
    if not originals or count <= 0:
        return []
    rng = random.Random(seed)
    labels = [lab for lab in label_set.displayed() if lab != NOT_CLEAR]
    trials = []
    for k in range(count):
        source, sid, a = originals[k % len(originals)]
        b = rng.choice([lab for lab in labels if lab != a])
        trials.append(Trial(
            trial_id=f"attention-{k + 1:03d}", trial_type="classify", role="attention", stimuli=(sid,),
            choices=tuple(label_set.displayed()), correct=b, condition="attention", source_image=source,
            category=a, timing=CLASSIFY_TIMING,
            instruction=f"Attention check: the next image shows a {a}. Please click \u201c{b}\u201d.",
        ))
    return trials


CLASSIFY_SCHEDULE = Schedule(break_every=100, attention_every=100, catch_every=None)
"""Burgert et al. 2025: an attention test every 100 trials; a break every 100."""
