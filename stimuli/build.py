"""The stimulus builder: run image transforms in parallel into an experiment directory.

Work is grouped per source image (decode once, apply every transform it needs), spread
over the machine's cores with a process pool, and shown with a progress bar. Each
stimulus' seed is derived from the build seed and what the stimulus is, so results do
not depend on worker scheduling, and a re-run finds stimuli it already made by their
provenance and skips them.
"""

from __future__ import annotations

import hashlib
import importlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from tqdm import tqdm

from cuebench.version import __version__
from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir, canonical_json, provenance_key
from cuebench.trials import Experiment, Stimulus
from cuebench.images import CorruptImageError

from .preflight import responses_held
from .sources import SourceImage, fit_to_stimulus

RESIZE_POLICY = "short side to 224 (Pillow bicubic), centre crop 224x224"


class BuildError(CuebenchError):
    """A build cannot proceed (bad option, or it would change an experiment that has data)."""


def stimulus_seed(seed: int, source: str, transform: str, params: dict) -> int:
    """A per-stimulus seed: stable across runs, machines and worker order."""
    text = f"{seed}\x00{source}\x00{transform}\x00{canonical_json(params)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


@dataclass(frozen=True)
class Task:
    """One stimulus to make from a source image: ``fn(image, transform, params, seed)``.

    ``fn`` is a ``"module:function"`` path so tasks can travel to worker processes.
    """

    transform: str
    params: dict
    seed: int | None
    fn: str | None = None  # None: the source image itself
    resize: str = RESIZE_POLICY  # how the source was framed before the transform (recorded, not part of the key)

    def provenance(self, source: SourceImage) -> dict:
        return {
            "source_image": source.name,
            "source_origin": source.origin,
            "transform": self.transform,
            "params": self.params,
            "seed": self.seed,
            "resize": self.resize,
            "software_version": __version__,
        }


@dataclass
class SourceJob:
    source: SourceImage
    tasks: list[Task] = field(default_factory=list)


def resolve(path: str) -> Callable:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def _run_source_job(root: str, job: SourceJob) -> list[Stimulus]:
    expdir = ExperimentDir(root)
    image = fit_to_stimulus(job.source.read())
    made = []
    for task in job.tasks:
        pixels = image if task.fn is None else resolve(task.fn)(image, task.transform, task.params, task.seed)
        made.append(expdir.write_stimulus(np.ascontiguousarray(pixels), task.provenance(job.source)))
    return made


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass
class BuildReport:
    stimuli: dict[tuple[str, str], Stimulus]  # (source name, provenance key) -> stimulus
    made: int
    reused: int
    failed: list[str]  # "name: reason"

    def get(self, source: SourceImage, task: Task) -> Stimulus | None:
        return self.stimuli.get((source.name, task_key(source, task)))


def run_jobs(expdir: ExperimentDir, jobs: list[SourceJob], *, workers: int | None = None,
             on_error: str = "fail", existing: Experiment | None = None, progress: bool = True) -> BuildReport:
    """Make every task's stimulus, reusing those an earlier build of this folder already made.

    ``on_error='skip'`` reports a corrupt source image by name and goes on without it;
    ``'fail'`` stops at the first one.
    """
    if on_error not in ("skip", "fail"):
        raise BuildError(f"--on-error must be 'skip' or 'fail', got {on_error!r}")
    known = known_stimuli(expdir, existing)
    results: dict[tuple[str, str], Stimulus] = {}
    todo: list[SourceJob] = []
    reused = 0
    for job in jobs:
        remaining = []
        for task in job.tasks:
            key = task_key(job.source, task)
            if key in known:
                results[(job.source.name, key)] = known[key]
                reused += 1
            else:
                remaining.append(task)
        if remaining:
            todo.append(SourceJob(job.source, remaining))
    failed: list[str] = []
    workers = workers or default_workers()
    total = sum(len(j.tasks) for j in todo)
    bar = tqdm(total=total, desc="stimuli", unit="img", disable=not progress or total == 0)
    made = 0

    def collect(job: SourceJob, stimuli: list[Stimulus]) -> None:
        nonlocal made
        for task, stim in zip(job.tasks, stimuli):
            results[(job.source.name, task_key(job.source, task))] = stim
        made += len(stimuli)
        bar.update(len(job.tasks))

    def handle_error(job: SourceJob, err: Exception) -> None:
        if on_error == "fail":
            bar.close()
            raise CorruptImageError(f"{err} (source image {job.source.name!r}; use --on-error skip to leave it out)") from None
        failed.append(f"{job.source.name}: {err.reason}")
        bar.update(len(job.tasks))

    if workers == 1 or len(todo) <= 1:
        for job in todo:
            try:
                collect(job, _run_source_job(str(expdir.root), job))
            except CorruptImageError as err:
                handle_error(job, err)
    else:
        # forkserver: a forked child of a parent that already ran OpenCV's thread pool can deadlock
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("forkserver")) as pool:
            futures = {pool.submit(_run_source_job, str(expdir.root), job): job for job in todo}
            for fut in as_completed(futures):
                job = futures[fut]
                try:
                    collect(job, fut.result())
                except CorruptImageError as err:
                    if on_error == "fail":
                        for other in futures:
                            other.cancel()
                    handle_error(job, err)
    bar.close()
    return BuildReport(results, made, reused, failed)


def known_stimuli(expdir: ExperimentDir, existing: Experiment | None) -> dict[str, Stimulus]:
    """Stimuli an earlier build of this folder (or a finished shard, ``stimuli.shards``) made
    and that are still on disk, by recipe (source, transform, params, seed), so a build can skip them."""
    from .shards import manifest_stimuli

    earlier = list(existing.stimuli.values()) if existing is not None else []
    return {provenance_key({"source_image": s.source_image, "transform": s.transform, "params": s.params,
                            "seed": s.seed}): s
            for s in manifest_stimuli(expdir) + earlier if expdir.stimulus_path(s).is_file()}


def task_key(source: SourceImage, task: Task) -> str:
    """What identifies a stimulus before it is made: its source and recipe."""
    return provenance_key({"source_image": source.name, "transform": task.transform,
                           "params": task.params, "seed": task.seed})


def check_replaceable(expdir: ExperimentDir, new: Experiment) -> None:
    """Refuse to change the name or trials of an experiment that already has responses."""
    n = responses_held(expdir) if expdir.exists() else 0
    if n == 0:
        return
    old = expdir.load()
    if old.name != new.name or [t.to_dict() for t in old.trials] != [t.to_dict() for t in new.trials]:
        raise BuildError(f"{expdir.root} already holds {n} responses and this build would change its name or trials; "
                         "build into a new folder (collected responses are never overwritten)")
