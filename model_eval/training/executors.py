"""Run training jobs: a local process pool (default), Ray, or Slurm through submitit.

Whichever runs them, each job writes its own result file into the study directory
(shared storage on a cluster), so results land in the same table and a re-run skips
finished jobs. Ray and submitit are optional: they are imported only when chosen.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from .jobs import TrainingError, TrainJob, run_job

EXECUTORS = ("local", "ray", "submitit")


def pending(jobs: list[TrainJob]) -> list[TrainJob]:
    """The jobs without a result file."""
    return [j for j in jobs if not j.result_path.is_file()]


def run_jobs(jobs: list[TrainJob], executor: str = "local", workers: int = 1,
             executor_options: dict | None = None) -> list[Path]:
    """Run the pending jobs on the chosen executor; return every job's result file."""
    todo = pending(jobs)
    options = executor_options or {}
    if executor == "local":
        _run_local(todo, workers)
    elif executor == "ray":
        _run_ray(todo, options)
    elif executor == "submitit":
        _run_submitit(todo, options)
    else:
        raise TrainingError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    missing = pending(jobs)
    if missing:
        raise TrainingError(f"{len(missing)} job(s) finished without a result, e.g. {missing[0].job_id}")
    return [j.result_path for j in jobs]


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run_local(jobs: list[TrainJob], workers: int) -> None:
    if not jobs:
        return
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        for job in tqdm(jobs, desc="training jobs", unit="job"):
            run_job(job, progress=True)
        return
    threads = max(1, _cores() // workers)
    jobs = [replace(j, runtime=replace(j.runtime, threads=j.runtime.threads or threads)) for j in jobs]
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(run_job, job) for job in jobs]
        for fut in tqdm(as_completed(futures), total=len(futures), desc="training jobs", unit="job"):
            fut.result()


def _optional(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainingError(f"--executor {extra} needs the '{module}' package, which is not installed "
                            f"(pip install {module}); or use --executor local") from None


def _run_ray(jobs: list[TrainJob], options: dict) -> None:
    ray = _optional("ray", "ray")
    ray.init(address=options.pop("address", None), ignore_reinit_error=True)
    remote = ray.remote(num_cpus=float(options.pop("num_cpus", 1)), num_gpus=float(options.pop("num_gpus", 0)))(run_job)
    refs = [remote.remote(job) for job in jobs]
    for _ in tqdm(range(len(refs)), desc="training jobs (ray)", unit="job"):
        done, refs = ray.wait(refs, num_returns=1)
        ray.get(done)


def _run_submitit(jobs: list[TrainJob], options: dict) -> None:
    if not jobs:
        return
    submitit = _optional("submitit", "submitit")
    folder = Path(jobs[0].study_dir) / "training" / "slurm"
    executor = submitit.AutoExecutor(folder=str(folder))
    executor.update_parameters(**{"timeout_min": 240, **options})
    submitted = executor.map_array(run_job, jobs)
    for job in tqdm(submitted, desc="training jobs (slurm)", unit="job"):
        job.result()
