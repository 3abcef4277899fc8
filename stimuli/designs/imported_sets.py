"""Importers of published stimulus sets, so their experiments can be re-run with people
and models unchanged.

``cue-conflict-import``: Geirhos et al. (2019) texture-shape cue-conflict images in their
layout ``<shape>/<shape>N-<texture>M.png`` -> 16-class ``classify`` trials with
``category`` = shape and ``texture_category`` = texture; the images whose shape and
texture classes agree are flagged (``params.same_class``), as the shape-bias analysis
leaves them out.

``dist-import``: a DiST release (Wen et al. 2024) with ``original/``, ``set1/``,
``set2/`` (and optionally ``labels.csv``) -> ``oddity`` trials of three images whose
correct answer is the original, with the original's position balanced over 1-3. The three
files of a triplet share a stem, whatever their suffixes (the public release has
``original/X.JPEG`` beside ``set1/X.jpg``), and are kept as they are: the release keeps each
ImageNet photo's own size (a 500 x 375 original has 500 x 375 versions), a prepared copy may
be 224 x 224 crops; a triplet whose three images differ in size is refused, since the size
alone would give the odd one away.
"""

from __future__ import annotations

import csv
import hashlib
import random
import re
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..build import BuildError
from cuebench.counterbalance import everyone_plan
from cuebench.labels import IMAGENET16, IMAGENET16_NAME
from cuebench.trials import Experiment, LabelSet, Schedule, Timing, Trial, standard_timing
from cuebench.words import say
from cuebench.images import IMAGE_SUFFIXES, CorruptImageError, decode_image
from ..options import OptionError
from ..sources import CHECK_PREFIX, SourceError, SourceImage
from . import Design
from .common import (HeldOut, build_provenance, by_class_in_turn, checks_per_person, shown_in_language, slug,
                     study_timing)

CUE_CONFLICT_NAME = re.compile(r"^(?P<shape>[a-z]+)\d+-(?P<texture>[a-z]+)\d+$")
POSITIONS = LabelSet("positions", ("1", "2", "3"), display_order="given", not_clear=False)


def _import_file(expdir, path: Path, provenance: dict, on_error: str, failed: list[str]):
    try:
        pixels = decode_image(path)
    except CorruptImageError as err:
        if on_error == "fail":
            raise CorruptImageError(f"{err} (use --on-error skip to leave it out)") from None
        failed.append(f"{path.name}: {err.reason}")
        return None
    return expdir.write_stimulus_bytes(path.read_bytes(), path.suffix, pixels, provenance)


class CueConflictImport(Design):
    """Geirhos et al. (2019) cue-conflict images as 16-class trials with shape and texture categories."""

    study_options = frozenset({"timing", "label_names"})

    def build(self, request) -> Experiment:
        return build_cue_conflict(request)


class DistImport(Design):
    """A DiST release (Wen et al. 2024) as oddity trials: the original among two disrupted versions."""

    study_options = frozenset({"timing", "practice", "catch_every", "attention", "check_images"})

    def build(self, request) -> Experiment:
        return build_dist(request)


def build_cue_conflict(request) -> Experiment:
    expdir, args = request.expdir, request.common
    root = Path(args.images)
    if not root.is_dir():
        raise SourceError(f"cue-conflict folder {root} does not exist")
    files = sorted(f for d in sorted(root.iterdir()) if d.is_dir() for f in d.iterdir()
                   if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise SourceError(f"{root} holds no <shape>/<shape>N-<texture>M.png images")
    label_set = shown_in_language(LabelSet(IMAGENET16_NAME, IMAGENET16), args)
    stimuli, trials, failed = {}, [], []
    for path in tqdm(files, desc="cue-conflict", unit="img"):
        match = CUE_CONFLICT_NAME.match(path.stem)
        if not match or match["shape"] != path.parent.name:
            raise SourceError(f"{path}: name does not follow <shape>/<shape>N-<texture>M.png")
        shape, texture = match["shape"], match["texture"]
        for cls in (shape, texture):
            if cls not in IMAGENET16:
                raise SourceError(f"{path}: class {cls!r} is not one of the 16 ImageNet entry-level classes")
        prov = {"source_image": path.stem, "source_origin": f"{path.parent.name}/{path.name}",
                "transform": "cue-conflict (Geirhos et al. 2019)", "params": {}, "seed": None}
        stim = _import_file(expdir, path, prov, args.on_error, failed)
        if stim is None:
            continue
        stimuli[stim.id] = stim
        trials.append(Trial(
            trial_id=f"cue-conflict--{path.stem}", trial_type="classify", role="test", stimuli=(stim.id,),
            choices=tuple(label_set.displayed()), correct=shape, condition="cue-conflict",
            params={"same_class": shape == texture}, source_image=path.stem, category=shape,
            texture_category=texture, timing=study_timing(args, standard_timing("classify")),
        ))
    return _finish(request, label_set, stimuli, trials, failed,
                   Schedule(break_every=100, attention_every=None, catch_every=None))


def _dist_labels(root: Path) -> dict[str, str]:
    labels = root / "labels.csv"
    if not labels.is_file():
        return {}
    with labels.open(newline="", encoding="utf-8") as fh:
        return {row["image"]: row.get("imagenet_name") or None for row in csv.DictReader(fh)}


@dataclass(frozen=True)
class Release:
    """A folder in the DiST release's layout: its ``folders`` (original, set1, set2), originals, each set's
    files by stem (``set1/X.jpg`` beside ``original/X.JPEG``) and the originals' ImageNet names."""

    folders: list[Path]
    originals: list[Path]
    by_stem: list[dict[str, Path]]
    names: dict[str, str]


def read_release(root: Path, option: str = "--images") -> Release:
    folders = [root / name for name in ("original", "set1", "set2")]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise SourceError(f"{option} {root}: a DiST release needs original/, set1/ and set2/; missing: "
                          f"{', '.join(missing)}")
    originals = sorted(f for f in folders[0].iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not originals:
        raise SourceError(f"{folders[0]} holds no images")
    by_stem = [{f.stem: f for f in sorted(folder.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES}
               for folder in folders[1:]]
    return Release(folders, originals, by_stem, _dist_labels(root))


def dist_checks(args, release: Release, tests: int) -> tuple[Release | None, HeldOut]:
    """The triplets of practice, catch and attention trials, from ``--check-images`` (a folder of other triplets
    in the release's layout), so every triplet of the release is a standard trial (DiST's 400). Each check a
    person sees has a triplet of its own (``checks_per_person``); asked for without ``--check-images``, or
    with too few triplets or one of the release's own originals there, the build is refused naming it."""
    catch_every = args.catch_every or 0
    needed = {"practice (--practice)": args.practice, "catch (--catch-every)": checks_per_person(tests, catch_every),
              "attention (--attention)": checks_per_person(tests, args.attention or 0)}
    asked = " + ".join(f"{n} {what}" for what, n in needed.items() if n)
    if not asked:
        return None, HeldOut([], [], [], [])
    if args.check_images is None:
        raise OptionError(f"{asked} trial(s) show triplets from outside the release (its {tests} are all standard "
                          "trials): give --check-images DIR, other triplets in the release's layout "
                          "(original/, set1/, set2/)")
    checks = read_release(Path(args.check_images), "--check-images")
    own = {hashlib.sha256(f.read_bytes()).hexdigest(): f for f in release.originals}
    for f in checks.originals:
        if (twin := own.get(hashlib.sha256(f.read_bytes()).hexdigest())) is not None:
            raise SourceError(f"--check-images {args.check_images}: {f.name} is the release's {twin.name}; check "
                              "triplets come from outside the release")
    pool = by_class_in_turn([SourceImage(CHECK_PREFIX + f.stem, checks.names.get(f.stem), str(f), lambda: None)
                             for f in checks.originals], args.seed)
    if sum(needed.values()) > len(pool):
        raise OptionError(f"{asked} trial(s) need as many triplets; --check-images {args.check_images} has "
                          f"{len(pool)}")
    cuts = list(accumulate(needed.values(), initial=0))
    return checks, HeldOut([], *(pool[a:b] for a, b in zip(cuts, cuts[1:])))


def build_dist(request) -> Experiment:
    """The release's triplets as oddity trials, every one a standard trial. ``--practice``, ``--catch-every``
    (``10``: the paper's protocol; none by default, as a model study wants) and ``--attention`` add trials on
    triplets from outside the release (``dist_checks``): practice trials are triplets with feedback; a catch
    trial shows the original, its mirror image and one disrupted version (the disrupted one is correct, as in
    DiST); an attention check shows a triplet and asks for a given key."""
    expdir, args = request.expdir, request.common
    release = read_release(Path(args.images))
    checks, held = dist_checks(args, release, len(release.originals))
    tests = [SourceImage(orig.stem, release.names.get(orig.stem), str(orig), lambda: None)
             for orig in release.originals]
    catch_every = args.catch_every or 0
    timing = study_timing(args, standard_timing("oddity"))
    rng = random.Random(args.seed)
    stimuli, trials, failed = {}, [], []
    for role, photos, source in (("test", tests, release), ("practice", held.practice, checks),
                                 ("catch", held.catch, checks), ("attention", held.attention, checks)):
        positions = [i % 3 for i in range(len(photos))]
        rng.shuffle(positions)
        for src, position in tqdm(list(zip(photos, positions)), desc=f"dist {role} triplets", unit="triplet"):
            made = _dist_triplet(expdir, source, src.name, Path(src.origin), role, args.on_error, failed)
            if made is None:
                continue
            stimuli.update((stim.id, stim) for stim in made)
            order = [made[1], made[2]]
            order.insert(position, made[0])
            odd = made[0] if role != "catch" else made[2]  # a catch trial's odd one is the disrupted version
            trial_id = f"dist--{src.name}" if role == "test" else f"{role}--{slug(src.name)}"
            trials.append(oddity_trial(trial_id, role, order, odd, src, timing, args.language, rng))
    return _finish(request, POSITIONS, stimuli, trials, failed,
                   Schedule(break_every=100, catch_every=catch_every or None, attention_every=args.attention or None))


def oddity_trial(trial_id: str, role: str, order: list, odd, src: SourceImage, timing: Timing, language: str,
                 rng: random.Random) -> Trial:
    """A DiST oddity trial of ``role`` showing the stimuli ``order``: the answer is the position of ``odd`` (the
    original; a catch trial's disrupted version), except an attention check's, a key drawn from ``rng`` that its
    instruction names ("please press 2"). One for the imported and the synthesised DiST designs."""
    correct = str(order.index(odd) + 1) if role != "attention" else str(rng.choice((1, 2, 3)))
    return Trial(trial_id=trial_id, trial_type="oddity", role=role, stimuli=tuple(s.id for s in order),
                 choices=POSITIONS.labels, correct=correct, condition="dist" if role == "test" else role, params={},
                 source_image=src.name, category=src.category, timing=timing,
                 instruction=say("attention_press", language, answer=correct) if role == "attention" else None)


def _dist_triplet(expdir, release: Release, name: str, orig: Path, role: str, on_error: str, failed: list[str]):
    """The original and the two versions a trial of ``role`` shows, stored under the source ``name``; a catch
    trial shows the original, its mirror image and set1's version instead. The versions are paired by stem (the
    release's ``original/X.JPEG`` beside ``set1/X.jpg``) and kept at their size; a triplet whose images differ in
    size would give the odd one away, so it is refused (or skipped). None when a file is corrupt and skipped."""
    paths = [orig] + [versions.get(orig.stem) for versions in release.by_stem]
    absent = [f"{folder}/{orig.stem}.*" for folder, p in zip(release.folders, paths) if p is None]
    if absent:
        raise SourceError(f"triplet {orig.stem} is incomplete: {', '.join(absent)} missing")
    made = []
    for path, version in zip(paths, ("original", "set1", "set2")):
        prov = {"source_image": name, "source_origin": f"{version}/{path.name}",
                "transform": "original" if version == "original" else "texture synthesis (DiST release)",
                "params": {"version": version}, "seed": None}
        made.append(_import_file(expdir, path, prov, on_error, failed))
    if any(m is None for m in made):
        return None
    sizes = [(m.width, m.height) for m in made]
    if len(set(sizes)) > 1:
        problem = (f"triplet {orig.stem}: its images differ in size ("
                   + ", ".join(f"{p.parent.name}/{p.name} {w} x {h}" for p, (w, h) in zip(paths, sizes))
                   + "), which would give the odd one away")
        if on_error == "fail":
            raise SourceError(problem + " (use --on-error skip to leave it out)")
        failed.append(problem)
        return None
    if role == "catch":
        mirrored = np.ascontiguousarray(decode_image(orig)[:, ::-1])
        mirror = expdir.write_stimulus(mirrored, {"source_image": name, "source_origin": f"original/{orig.name}",
                                                  "transform": "mirror", "params": {}, "seed": None})
        made = [made[0], mirror, made[1]]
    return made


def _finish(request, label_set, stimuli, trials, failed, schedule) -> Experiment:
    if not trials:
        raise BuildError(f"no trials imported from {request.common.images}")
    return Experiment(
        name=request.name, design=request.design, label_set=label_set, stimuli=stimuli, trials=trials,
        schedule=schedule, assignment=everyone_plan(trials),
        provenance={**build_provenance(request), "skipped_images": failed},
    )
