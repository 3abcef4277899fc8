"""Cue-conflict stimuli without style transfer (Heinert et al., paper 000, Sec. IV-b and
Fig. 5): the EED shape cue of an image of class i combined with the texture cue of an
image of class j != i. Every trial records ``category`` (the shape's class, the correct
answer) and ``texture_category``, so the shape-bias analysis of Geirhos et al. (2019)
runs on it unchanged. The parts (each image's EED and texture cue) are listed among the
experiment's stimuli too, with their provenance, so a rebuild reuses them.

Combination, with weights gamma_S (shape) and gamma_T (texture):

- ``blend``: gamma_S * S + gamma_T * T with gamma_S + gamma_T = 1 (default 0.5 / 0.5,
  the paper's "EED(0.5), Voronoi(0.5)");
- ``sum``: clip(gamma_S * S + gamma_T * T, 0, 255) (default 1 / 1); with the tex.EED
  textures T is the signed difference original - EED (Fig. 5: "sum of an EED cat image
  with the difference of an original image of an elephant and its EED version").
"""

from __future__ import annotations

import functools
import random
from typing import Literal

import numpy as np

from pydantic import Field, model_validator

from ..build import BuildError, Task, known_stimuli, stimulus_seed, task_key
from cuebench.counterbalance import everyone_plan
from cuebench.trials import Experiment, Trial, standard_timing
from cuebench.images import decode_image

from ..options import OptionError
from ..sources import fit_to_stimulus, resolve_images
from . import Design
from .common import (attention_trials, build_provenance, classify_schedule, held_originals, label_set_for, slug,
                     run_with_checks, study_checks, study_timing)
from .cue_decomposition import (CueOptions, cue_jobs, eed_params, make_shape_cues, shape_cue_pixels, shards,
                                texture_params, texture_stimuli)

DEFAULT_GAMMAS = {"blend": (0.5, 0.5), "sum": (1.0, 1.0)}


class CueConflictOptions(CueOptions):
    """Options of the cue-conflict-eed design: the EED / texture-cue options and how the two cues combine."""

    conflict_mode: Literal["blend", "sum"] = Field("blend", description="blend (weights sum to 1) or sum and clip "
                                                                        "to 0-255")
    gamma_shape: float | None = Field(None, ge=0, description="weight gamma_S of the EED shape cue (default 0.5 for blend, "
                                                        "1 for sum)")
    gamma_texture: float | None = Field(None, ge=0, description="weight gamma_T of the texture cue (default 0.5 for "
                                                          "blend, 1 for sum)")
    conflict_textures: int = Field(8, ge=1, description="texture images (of other classes, drawn by seed) paired "
                                                        "with each shape image; at most the number available "
                                                        "(Geirhos et al. 2019: 8 per shape image)")

    @model_validator(mode="after")
    def _blend_weights_sum_to_one(self) -> "CueConflictOptions":
        g_s, g_t = self.gammas()
        if self.conflict_mode == "blend" and abs(g_s + g_t - 1) > 1e-9:
            raise OptionError(f"blend weights must sum to 1, got --gamma-shape {g_s} + --gamma-texture {g_t}; "
                              "use --conflict-mode sum for free weights")
        return self

    def gammas(self) -> tuple[float, float]:
        """(gamma_S, gamma_T): the weights given, else the mode's defaults."""
        default_s, default_t = DEFAULT_GAMMAS[self.conflict_mode]
        return (default_s if self.gamma_shape is None else self.gamma_shape,
                default_t if self.gamma_texture is None else self.gamma_texture)


class CueConflictEED(Design):
    """Cue conflict without style transfer (Heinert et al.): one photo's EED shape cue with another's texture."""

    Options = CueConflictOptions
    study_options = frozenset({"attention", "check_images", "timing", "label_names"})

    def build(self, request) -> Experiment:
        return build(request)

    def shards(self, request, shard_size: int) -> list:
        return shards(request, shard_size)


def combine(shape: np.ndarray, texture: np.ndarray, gamma_s: float, gamma_t: float) -> np.ndarray:
    """Heinert et al. Sec. IV-b: clip(gamma_S * S + gamma_T * T, 0, 255) as uint8
    (a blend when the weights sum to 1 and both images are on 0-255)."""
    mixed = gamma_s * np.asarray(shape, np.float64) + gamma_t * np.asarray(texture, np.float64)
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


def check_pairing(sources) -> None:
    if len({s.category for s in sources}) < 2:
        raise BuildError("cue-conflict-eed needs images of at least two classes")


def pairs(sources, per_shape: int, seed: int) -> list[tuple]:
    """(shape source, texture source) pairs: each shape image with up to ``per_shape``
    images of other classes, the least used textures first (random among equals), so
    every image serves as a texture about equally often."""
    check_pairing(sources)
    rng = random.Random(seed)
    used = {src.name: 0 for src in sources}
    out = []
    for shape in sources:
        others = [t for t in sources if t.category != shape.category]
        rng.shuffle(others)
        others.sort(key=lambda t: used[t.name])
        for texture in others[:per_shape]:
            used[texture.name] += 1
            out.append((shape, texture))
    return out


def build(request) -> Experiment:
    args, common, expdir = request.options, request.common, request.expdir
    sources = resolve_images(common.images, common.labels)
    label_set = label_set_for(sources, common)
    g_s, g_t = args.gammas()
    t_params = texture_params(args)
    shape_params = {"method": "eed", **eed_params(args)}
    pick = functools.partial(study_checks, sources, label_set, common, trials_per_photo=args.conflict_textures)
    check_pairing(sources)
    jobs = cue_jobs(sources, args, common.seed, t_params)
    existing = expdir.load() if expdir.exists() else None
    report, held = run_with_checks(expdir, jobs, pick(), lambda excluded: pick(excluded=excluded), common, existing)
    failed = {f.split(":", 1)[0] for f in report.failed}
    usable = [src for src in sources if src.name not in failed]
    plan = pairs(usable, args.conflict_textures, common.seed)
    shapes, fresh = make_shape_cues(expdir, usable, args, existing)
    textures = texture_stimuli(expdir, args, common.seed, jobs, report, usable, existing, shapes, fresh)
    known = known_stimuli(expdir, existing)
    by_name = {src.name: src for src in usable}

    @functools.cache
    def shape_pixels(name: str) -> np.ndarray:
        return shape_cue_pixels(expdir, shapes[name], fresh)

    @functools.cache
    def texture_pixels(name: str) -> np.ndarray:
        if args.conflict_mode == "sum" and args.texture_cue in ("tex_eed", "tex_eed_patch"):
            from ..texture_cues import signed_texture

            seed = stimulus_seed(common.seed, name, "texture_cue", t_params)
            return signed_texture(args.texture_cue, fit_to_stimulus(by_name[name].read()), shape_pixels(name), seed)
        return decode_image(expdir.stimulus_path(textures[name]))

    mix = {"mode": args.conflict_mode, "gamma_shape": g_s, "gamma_texture": g_t}
    timing = study_timing(common, standard_timing("classify"))
    stimuli, trials = {}, []
    for shape_src, texture_src in plan:
        params = {"texture_image": texture_src.name, "texture_cue": t_params, "shape_cue": shape_params, **mix}
        task = Task("cue_conflict_eed", params, None)
        stim = known.get(task_key(shape_src, task))
        if stim is None:
            pixels = combine(shape_pixels(shape_src.name), texture_pixels(texture_src.name), g_s, g_t)
            stim = expdir.write_stimulus(pixels, task.provenance(shape_src))
        stimuli[stim.id] = stim
        trials.append(Trial(
            trial_id=f"{slug(shape_src.name)}--{slug(texture_src.name)}", trial_type="classify", role="test",
            stimuli=(stim.id,), choices=tuple(label_set.displayed()), correct=shape_src.category,
            condition="cue_conflict_eed", params={"texture_image": texture_src.name,
                                                  "texture_cue": args.texture_cue, **mix},
            source_image=shape_src.name, category=shape_src.category, texture_category=texture_src.category,
            timing=timing, mask_seed=stimulus_seed(common.seed, shape_src.name, "mask", params),
        ))
    for part in [*shapes.values(), *textures.values()]:  # listed, so a rebuild finds them and skips EED
        stimuli[part.id] = part
    for job in jobs[:len(sources)]:
        if job.source.name not in failed:
            original = report.get(job.source, job.tasks[0])
            stimuli[original.id] = original
    trials += attention_trials(label_set, held_originals(held.attention, report, failed, stimuli), common.seed, timing,
                               common.language)
    print(f"stimuli: {len(plan)} cue-conflict images from {len(usable)} source images, "
          f"{len(report.failed)} skipped")
    return Experiment(
        name=request.name, design=request.design, label_set=label_set, stimuli=stimuli,
        trials=trials, schedule=classify_schedule(common), assignment=everyone_plan(trials),
        provenance={**build_provenance(request), "skipped_images": report.failed},
    )
