"""A tiny experiment with every kind of web trial, to try the server in a minute.

Two Latin-square groups (arms ``original`` and ``grayscale``) over two classification
images and two DiST oddity triplets (the original among two structure-disrupted versions), one practice trial, one attention trial (Burgert et al.
2025: "the next image shows an A; click B") and one DiST catch trial (Wen et al. 2024:
the original, its mirror image and a structure-disrupted version; the disrupted one is
the odd one). Built from scikit-image's photos, so it needs no data and no network; the
server's tests and load benchmark use it too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cuebench.counterbalance import latin_square_plan
from cuebench.expdir import ExperimentDir
from cuebench.labels import IMAGENET16, IMAGENET16_NAME
from cuebench.trials import Experiment, LabelSet, Schedule, Trial, standard_timing
from cuebench.words import say, with_article
from .sources import default_images, fit_to_stimulus

CLASSIFY_IMAGES = {"chelsea": "cat", "coffee": "bottle"}
ODDITY_IMAGES = ("rocket", "motorcycle")
PRACTICE_IMAGE, ATTENTION_IMAGE, CATCH_IMAGE = "astronaut", "camera", "flower"
ATTENTION_SHOWN, ATTENTION_ANSWER = "cat", "dog"
ODD_POSITION = {"rocket": "3", "motorcycle": "1", "flower": "2"}


def grayscale(pixels: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma, repeated over the three channels."""
    luma = pixels @ np.array([0.299, 0.587, 0.114])
    return np.repeat(np.clip(np.rint(luma), 0, 255).astype(np.uint8)[..., None], 3, axis=2)


def disrupt(pixels: np.ndarray, seed: int, grid: int = 4) -> np.ndarray:
    """Shuffle a grid x grid tiling: local texture kept, global structure destroyed."""
    size = pixels.shape[0] // grid
    tiles = [pixels[r * size:(r + 1) * size, c * size:(c + 1) * size] for r in range(grid) for c in range(grid)]
    order = np.random.default_rng(seed).permutation(len(tiles))
    rows = [np.concatenate([tiles[order[r * grid + c]] for c in range(grid)], axis=1) for r in range(grid)]
    return np.ascontiguousarray(np.concatenate(rows, axis=0))


def build_sample_experiment(root: str | Path, name: str = "web-sample") -> Experiment:
    """Write the sample experiment to ``root`` (experiment.json + stimuli/) and return it."""
    folder = ExperimentDir(root)
    photos = {img.name: fit_to_stimulus(img.read()) for img in default_images()}
    stimuli = {}

    def store(pixels: np.ndarray, source: str, transform: str) -> str:
        stim = folder.write_stimulus(pixels, {"source_image": source, "transform": transform, "params": {}, "seed": 0})
        stimuli[stim.id] = stim
        return stim.id

    arms = {"original": lambda p: p, "grayscale": grayscale}
    trials: list[Trial] = []
    for source, category in CLASSIFY_IMAGES.items():
        for arm, transform in arms.items():
            trials.append(Trial(f"{source}-{arm}", "classify", "test", (store(transform(photos[source]), source, arm),),
                                tuple(IMAGENET16), category, condition=arm, source_image=source, category=category,
                                timing=standard_timing("classify")))
    for source in (*ODDITY_IMAGES, CATCH_IMAGE):
        arm_list = arms.items() if source != CATCH_IMAGE else [("original", arms["original"])]
        for arm, transform in arm_list:
            image = transform(photos[source])
            odd = int(ODD_POSITION[source]) - 1
            if source == CATCH_IMAGE:
                others, odd_one = [image, np.ascontiguousarray(image[:, ::-1])], disrupt(image, seed=0)
            else:
                others, odd_one = [disrupt(image, seed=1), disrupt(image, seed=2)], image
            triplet = others[:odd] + [odd_one] + others[odd:]
            ids = tuple(store(p, source, f"{arm}-{k}") for k, p in enumerate(triplet))
            role = "catch" if source == CATCH_IMAGE else "test"
            trials.append(Trial(f"{source}-{arm}-oddity" if role == "test" else f"catch-{source}", "oddity", role, ids,
                                ("1", "2", "3"), ODD_POSITION[source], condition=arm if role == "test" else "catch",
                                source_image=source, timing=standard_timing("oddity")))
    trials.append(Trial("practice-astronaut", "classify", "practice",
                        (store(photos[PRACTICE_IMAGE], PRACTICE_IMAGE, "original"),), tuple(IMAGENET16), None,
                        condition="practice", source_image=PRACTICE_IMAGE))
    trials.append(Trial("attention-camera", "classify", "attention",
                        (store(photos[ATTENTION_IMAGE], ATTENTION_IMAGE, "original"),), tuple(IMAGENET16),
                        ATTENTION_ANSWER, condition="attention", source_image=ATTENTION_IMAGE, category=ATTENTION_SHOWN,
                        instruction=say("attention_classify", shown=with_article(ATTENTION_SHOWN),
                                        answer=ATTENTION_ANSWER)))
    experiment = Experiment(
        name=name, design="web-sample", label_set=LabelSet(IMAGENET16_NAME, IMAGENET16), stimuli=stimuli,
        trials=trials, schedule=Schedule(break_every=3, catch_every=10, attention_every=100),
        assignment=latin_square_plan(trials), provenance={"builder": "stimuli.web_sample"})
    folder.save(experiment)
    return experiment
