"""Training jobs of every study kind as shards of the executor layer (``cuebench.executors``): local, Ray or
submitit.

Each job writes its own result file into the study directory (shared storage on a
cluster), so results land in the same table whichever executor ran them, and a re-run
skips finished jobs.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from cuebench.executors import ExecutorSpec, Shard, parse_executor, run_shards

from .jobs import StudyJob, run_job


def pending(jobs: list[StudyJob]) -> list[StudyJob]:
    """The jobs without a result file."""
    return [j for j in jobs if not j.result_path.is_file()]


def job_shard(job: StudyJob) -> Shard:
    gpus = 1.0 if job.runtime.device.startswith("cuda") else 0.0
    return Shard(job.job_id, run_job, (job,), Path.is_file, (job.result_path,), gpus=gpus)


def run_jobs(jobs: list[StudyJob], executor: str | ExecutorSpec = "local", workers: int = 1,
             executor_options: list[str] | None = None) -> list[Path]:
    """Run the pending jobs on the chosen executor; return every job's result file.

    Parallel local jobs share the machine's cores: each gets ``cores // workers`` threads.
    """
    spec = executor if isinstance(executor, ExecutorSpec) else parse_executor(executor, executor_options or [])
    if spec.name == "local" and workers > 1:
        spec = replace(spec, options={"workers": workers, **spec.options})
    parallel = int(spec.options.get("workers", 1)) if spec.name == "local" else 1
    if parallel > 1:
        threads = max(1, len(os.sched_getaffinity(0)) // parallel)
        jobs = [replace(j, runtime=replace(j.runtime, threads=j.runtime.threads or threads)) for j in jobs]
    study_dir = Path(jobs[0].study_dir) if jobs else Path(".")
    run_shards([job_shard(j) for j in jobs], spec, desc="training jobs",
               default_folder=study_dir / "training" / "submitit")
    return [j.result_path for j in jobs]


def run_study(jobs: list[StudyJob], executor: ExecutorSpec, workers: int = 1) -> None:
    """What a training command does with its planned jobs: say how many are left, run them."""
    todo = len(pending(jobs))
    print(f"{len(jobs)} jobs, {len(jobs) - todo} already finished, {todo} to run on '{executor.name}'")
    run_jobs(jobs, executor, workers)
