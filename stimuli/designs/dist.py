"""DiST oddity experiments (Wen et al. 2024, paper 003): each original with ``--variants``
texture-synthesis versions of itself that keep local texture and destroy global
structure; an ``oddity`` trial shows the original and two versions, and the original is
the odd one out.

Every photo of ``--images`` is an original of standard trials. Practice, catch and
attention trials are made the same way from check photos outside the study
(``--check-images``, else the bundled ones: ``common.study_checks``), so a participant
never sees a study photo outside its scored trials: a catch trial shows a check photo, its
mirror image and one disrupted version (the disrupted one is the odd one), a practice
trial a triplet with feedback, an attention check a triplet and the key to press. The
syntheses run batched in torch (Gram backend: ``stimuli.texture_synthesis``; weight-free
backend: ``stimuli.ps_synthesis``), skip what an earlier build of the folder made, and are
scored in ``synthesis_quality.csv`` so failed ones are visible and can be regenerated.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np
from tqdm import tqdm

from pydantic import Field, model_validator

from ..build import BuildError, SourceJob, Task, known_stimuli, stimulus_seed, task_key
from cuebench.csvsafe import csv_text
from cuebench.counterbalance import everyone_plan
from cuebench.expdir import ExperimentDir, atomic_write
from cuebench.trials import Experiment, Schedule, Stimulus, standard_timing
from cuebench.images import decode_image

from ..sources import SourceImage, fit_to_stimulus, resolve_images
from ..options import DesignOptions, OptionError
from ..ps_synthesis import DEFAULT_STEPS as PS_STEPS
from ..texture_synthesis import DEFAULT_FEATURE_NET, DEFAULT_STEPS, FEATURE_LAYERS, OPTIMIZERS, STEPS_PER_DIST_STEP
from . import Design
from .common import build_provenance, run_with_checks, slug, study_checks, study_timing
from .imported_sets import POSITIONS, oddity_trial

BACKENDS = ("gram", "ps")
QUALITY_FILE = "synthesis_quality.csv"
FLAG_TEXTURE_BELOW = 0.7
FLAG_STRUCTURE_ABOVE = 0.3
"""A synthesis is flagged when it lost texture (LV or HFE ratio < 0.7) or kept global
structure (GC > 0.3): the checks of the issue, on Burgert et al.'s metrics."""
QUALITY_COLUMNS = ("stimulus_id", "source_image", "role", "variant", "attempt", "seed", "synthesis", "loss",
                   "LV", "HFE", "ESSIM", "GC", "Texture", "Shape", "flagged")
BREAK_EVERY = 100


class DistOptions(DesignOptions):
    """Options of the dist design."""

    variants: int = Field(2, ge=2, description="disrupted versions per original, an even number (two per oddity "
                                               "trial; DiST: 2)")
    synthesis: Literal[BACKENDS] = Field("gram", description="gram: Gatys et al. 2015 on a CNN's features; ps: "
                                                             "Portilla-Simoncelli, no weights")
    feature_net: str = Field(DEFAULT_FEATURE_NET, description="feature CNN for --synthesis gram, NAME[:WEIGHTS] "
                                                              "(vgg19, tf_efficientnet_lite0/1/2)")
    synthesis_steps: int | None = Field(None, ge=1, description=f"synthesis steps, optimiser iterations (default: "
                                                                f"{DEFAULT_STEPS} for gram, {PS_STEPS} outer L-BFGS "
                                                                f"steps for ps; DiST's own 100 steps are "
                                                                f"{100 * STEPS_PER_DIST_STEP} of gram's)")
    synthesis_optimizer: Literal[OPTIMIZERS] = Field("lbfgs", description="gram optimiser")
    synthesis_device: str = Field("auto", description="torch device: cpu, cuda, cuda:1, auto")
    synthesis_batch: int | None = Field(None, ge=1, description="images synthesised together (gram default: 8 on "
                                                                "a CPU, 32 on a GPU)")
    catch_every: int = Field(10, ge=0, description="one catch trial (a check photo, its mirror image and one "
                                                   "disrupted version) after every N standard trials (DiST: 10; "
                                                   "0: none)")
    regenerate_flagged: bool = Field(False, description="re-synthesise, from a new seed, the versions "
                                                        "synthesis_quality.csv flags")

    @model_validator(mode="after")
    def _synthesis_recipe_exists(self) -> "DistOptions":
        if self.variants % 2:
            raise OptionError(f"--variants must be an even number (two versions per oddity trial), "
                              f"got {self.variants}")
        name = self.feature_net.partition(":")[0]
        if self.synthesis == "gram" and name not in FEATURE_LAYERS:
            raise OptionError(f"--feature-net {self.feature_net!r} has no default layer set; "
                              f"choose one of {', '.join(FEATURE_LAYERS)}")
        return self


class Dist(Design):
    """DiST oddity (Wen et al. 2024): each original with texture syntheses that destroy global structure."""

    Options = DistOptions
    study_options = frozenset({"timing", "practice", "attention", "check_images"})

    def build(self, request) -> Experiment:
        return build(request)


@dataclass(frozen=True)
class Backend:
    """A synthesis backend: the recipe recorded in provenance, and how to run it lazily."""

    name: str
    params: dict
    device: str

    @property
    def transform(self) -> str:
        return f"texture synthesis ({self.name})"

    def runner(self, load_feature_net):
        """``run(images, seeds) -> SynthesisResult``; loads the feature net once through the
        loader the command handed in (``cuebench_app.feature_nets.load_feature_net``)."""
        from ..texture_synthesis import synthesize

        if self.name == "ps":
            from ..ps_synthesis import synthesize as ps_synthesize

            return lambda images, seeds: ps_synthesize(images, seeds, steps=self.params["steps"], device=self.device)
        net = load_feature_net(self.params["feature_net"], self.device, tuple(self.params["layers"]))
        return lambda images, seeds: synthesize(images, seeds, net, steps=self.params["steps"],
                                                optimizer=self.params["optimizer"],
                                                noise_scale=self.params["noise_scale"])


def resolve_synthesis_device(spec: str) -> str:
    """``auto`` -> cuda when torch sees a GPU, else cpu."""
    from ..devices import resolve_device

    return resolve_device(spec, "--synthesis-device", BuildError)


def backend_for(args: DistOptions) -> Backend:
    """The backend and its recipe on the device asked for (the options themselves are checked by ``DistOptions``)."""
    from ..texture_synthesis import NOISE_SCALE

    device = resolve_synthesis_device(args.synthesis_device)
    if args.synthesis == "ps":
        from ..ps_synthesis import settings

        return Backend("ps", {**settings(), "steps": args.synthesis_steps or PS_STEPS}, device)
    name = args.feature_net.partition(":")[0]
    return Backend("gram", {"feature_net": args.feature_net, "layers": list(FEATURE_LAYERS[name]),
                            "layer_weights": "equal", "steps": args.synthesis_steps or DEFAULT_STEPS,
                            "optimizer": args.synthesis_optimizer, "noise_scale": NOISE_SCALE}, device)


def quality_flag(metrics: dict) -> bool:
    return (metrics["LV"] < FLAG_TEXTURE_BELOW or metrics["HFE"] < FLAG_TEXTURE_BELOW
            or metrics["GC"] > FLAG_STRUCTURE_ABOVE)


@dataclass
class Version:
    """One disrupted version to have: which original, which variant, and its recipe."""

    source: SourceImage
    role: str
    variant: int
    task: Task
    stimulus: Stimulus | None = None
    loss: float | None = None


class VersionMaker:
    """Finds or synthesises the disrupted versions, batched, skipping those on disk."""

    def __init__(self, expdir: ExperimentDir, args: DistOptions, seed: int, backend: Backend,
                 existing: Experiment | None, feature_net_loader):
        self.expdir, self.args, self.seed, self.backend = expdir, args, seed, backend
        self.feature_net_loader = feature_net_loader
        self.known = known_stimuli(expdir, existing)
        self.originals: dict[str, np.ndarray] = {}

    def original(self, src: SourceImage) -> np.ndarray:
        if src.name not in self.originals:
            self.originals[src.name] = fit_to_stimulus(src.read())
        return self.originals[src.name]

    def task(self, src: SourceImage, variant: int, attempt: int) -> Task:
        params = {**self.backend.params, "variant": variant, "attempt": attempt}
        return Task(self.backend.transform, params, stimulus_seed(self.seed, src.name, self.backend.transform, params))

    def plan(self, src: SourceImage, role: str, variant: int) -> Version:
        """The latest attempt an earlier build made (or attempt 0); with
        ``--regenerate-flagged``, the next attempt when the latest is flagged."""
        attempt = 0
        while task_key(src, self.task(src, variant, attempt + 1)) in self.known:
            attempt += 1
        task = self.task(src, variant, attempt)
        stim = self.known.get(task_key(src, task))
        if stim is not None and self.args.regenerate_flagged:
            from ..quality import quality_metrics

            pixels = decode_image(self.expdir.stimulus_path(stim))
            if quality_flag(quality_metrics(self.original(src), pixels)):
                task, stim = self.task(src, variant, attempt + 1), None
        return Version(src, role, variant, task, stim)

    def make(self, versions: list[Version]) -> None:
        todo = [v for v in versions if v.stimulus is None]
        if not todo:
            return
        device = self.backend.device
        # PS runs one image at a time anyway: a batch of 1 moves the bar per image
        batch = self.args.synthesis_batch or (1 if self.backend.name == "ps" else 8 if device == "cpu" else 32)
        run = self.backend.runner(self.feature_net_loader)
        with tqdm(total=len(todo), desc=f"synthesis ({self.backend.name}, {device})", unit="img") as bar:
            for start in range(0, len(todo), batch):
                chunk = todo[start:start + batch]
                images = np.stack([self.original(v.source) for v in chunk])
                result = run(images, [v.task.seed for v in chunk])
                for v, pixels, loss in zip(chunk, result.images, result.losses):
                    v.stimulus = self.expdir.write_stimulus(pixels, v.task.provenance(v.source))
                    v.loss = float(loss)
                bar.update(len(chunk))


def write_quality(expdir: ExperimentDir, maker: VersionMaker, versions: list[Version]) -> list[dict]:
    """``synthesis_quality.csv``: loss and Burgert et al.'s metrics of every version against
    its original, flagged when texture was lost or structure kept. Losses of versions an
    earlier build made come from its file."""
    from ..quality import quality_metrics

    path = expdir.root / QUALITY_FILE
    earlier = {}
    if path.is_file():
        with path.open(newline="", encoding="utf-8") as fh:
            earlier = {row["stimulus_id"]: row for row in csv.DictReader(fh)}
    rows = []
    for v in tqdm(versions, desc="synthesis quality", unit="img"):
        fresh = v.loss is not None
        pixels = decode_image(expdir.stimulus_path(v.stimulus))
        metrics = quality_metrics(maker.original(v.source), pixels)
        loss = v.loss if fresh else earlier.get(v.stimulus.id, {}).get("loss", "")
        rows.append({"stimulus_id": v.stimulus.id, "source_image": v.source.name, "role": v.role,
                     "variant": v.variant, "attempt": v.task.params["attempt"], "seed": v.task.seed,
                     "synthesis": maker.backend.name, "loss": loss, **metrics, "flagged": quality_flag(metrics)})
    text = csv_text(QUALITY_COLUMNS, ({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()}
                                      for row in rows))
    atomic_write(path, text.encode())
    return rows


def print_quality(rows: list[dict]) -> None:
    flagged = [f"{r['source_image']} v{r['variant']}" for r in rows if r["flagged"]]
    mean = {m: float(np.mean([r[m] for r in rows])) for m in ("LV", "HFE", "GC")}
    print(f"synthesis quality: {len(rows)} versions, mean LV {mean['LV']:.2f}, HFE {mean['HFE']:.2f}, "
          f"GC {mean['GC']:.2f}; {len(flagged)} flagged (LV or HFE < {FLAG_TEXTURE_BELOW} or GC > "
          f"{FLAG_STRUCTURE_ABOVE})" + (": " + ", ".join(flagged) if flagged else ""))
    if flagged:
        print(f"  see {QUALITY_FILE}; re-run the same command with --regenerate-flagged to re-synthesise them")


def balanced_positions(count: int, rng: random.Random) -> list[int]:
    """Positions 0-2, each used count/3 times (up to one), in seeded random order."""
    positions = [i % 3 for i in range(count)]
    rng.shuffle(positions)
    return positions


ORIGINAL = Task("original", {}, None)


def build(request) -> Experiment:
    """Standard trials from every photo; practice, catch and attention trials from check photos
    (``study_checks``, kept apart from the study's by ``run_with_checks``). The design's own catch trials
    (``--catch-every 10``) that the bundled check photos cannot cover are left out with a note; asked for, they
    are refused naming ``--check-images``. No attention checks unless ``--attention N`` asks, as in the
    imported DiST set."""
    args, expdir = request.options, request.expdir
    common = request.common.model_copy(update={"attention": request.common.attention or 0})
    backend = backend_for(args)
    sources = resolve_images(common.images, common.labels)
    per_original = args.variants // 2
    pick = partial(study_checks, sources, None, common, args.catch_every, per_original,
                   catch_asked="catch_every" in args.model_fields_set)
    existing = expdir.load() if expdir.exists() else None
    report, held = run_with_checks(expdir, [SourceJob(src, [ORIGINAL]) for src in sources], pick(),
                                   lambda excluded: pick(excluded=excluded), common, existing)
    photos = {role: [src for src in group if report.get(src, ORIGINAL) is not None]
              for role, group in (("test", held.tests), ("practice", held.practice), ("catch", held.catch),
                                  ("attention", held.attention))}
    if not photos["test"]:
        raise BuildError(f"no trials made from {common.images}: every image failed")
    versions_of = {"test": args.variants, "practice": 2, "catch": 1, "attention": 2}
    maker = VersionMaker(expdir, args, common.seed, backend, existing, request.feature_net_loader)
    versions = [maker.plan(src, role, k) for role, group in photos.items() for src in group
                for k in range(1, versions_of[role] + 1)]
    maker.make(versions)
    rows = write_quality(expdir, maker, versions)
    disrupted: dict[str, list[Stimulus]] = {}
    for v in versions:
        disrupted.setdefault(v.source.name, []).append(v.stimulus)
    timing = study_timing(common, standard_timing("oddity"))
    rng = random.Random(common.seed)
    stimuli: dict[str, Stimulus] = {}
    trials = []
    for role, group in photos.items():
        triplets = per_original if role == "test" else 1
        positions = iter(balanced_positions(len(group) * triplets, rng))
        for src in group:
            original = report.get(src, ORIGINAL)
            for k in range(triplets):
                position = next(positions)
                if role == "catch":  # the odd one is the disrupted version, beside the original and its mirror
                    mirror = expdir.write_stimulus(np.ascontiguousarray(maker.original(src)[:, ::-1]),
                                                   Task("mirror", {}, None).provenance(src))
                    order, odd = [original, mirror], disrupted[src.name][0]
                else:
                    order, odd = list(disrupted[src.name][2 * k:2 * k + 2]), original
                order.insert(position, odd)
                suffix = f"--{k + 1}" if triplets > 1 else ""
                trial_id = f"{'dist' if role == 'test' else role}--{slug(src.name)}{suffix}"
                trials.append(oddity_trial(trial_id, role, order, odd, src, timing, common.language, rng))
                stimuli.update((s.id, s) for s in order)
    print_quality(rows)
    print(f"stimuli: {report.made} originals made, {report.reused} already there, "
          f"{len(report.failed)} images skipped")
    return Experiment(
        name=request.name, design=request.design, label_set=POSITIONS, stimuli=stimuli, trials=trials,
        schedule=Schedule(catch_every=args.catch_every if photos["catch"] else None, break_every=BREAK_EVERY,
                          attention_every=common.attention or None),
        assignment=everyone_plan(trials),
        provenance={**build_provenance(request), "synthesis": {"backend": backend.name, **backend.params},
                    "skipped_images": report.failed},
    )
