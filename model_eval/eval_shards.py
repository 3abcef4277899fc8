"""``cuebench eval`` on an executor (``cuebench.executors``): one shard per model x experiment.

A shard calls ``evaluate_experiment`` for its one model, so its answers reach the
experiment's response store exactly as a local run's do: keyed by (experiment, observer,
session, trial), committed one batch at a time. Two shards finishing together write
different keys; a shard whose worker was killed is run again and answers only what is
still missing, so every row is stored once. A shard then records what its model did in
``.shards/``, which marks it finished; the records are removed once the summary is made.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from cuebench.executors import ExecutorSpec, Shard, run_shards
from cuebench.expdir import ExperimentDir, atomic_write, canonical_json, provenance_key
from cuebench.responses import ResponseStore

from .evaluate import EvalSummary, ModelRun, evaluate_experiment, summarise
from .observers import check_spec


def evaluate_model(experiment: str, model: str, settings: dict, record: str) -> None:
    """A shard's work: the model answers what it has not answered yet, then the record is written."""
    summary = evaluate_experiment(experiment, [model], progress=False, **settings)
    atomic_write(Path(record), canonical_json([asdict(run) for run in summary.runs]).encode())


def model_shard(expdir: ExperimentDir, model: str, settings: dict) -> Shard:
    record = expdir.shards_dir / f"eval-{provenance_key({'model': model, **settings})}.json"
    gpus = 1.0 if str(settings.get("device", "")).startswith("cuda") else 0.0
    return Shard(f"eval:{model}@{expdir.root.name}", evaluate_model, (str(expdir.root), model, settings, str(record)),
                 Path.is_file, (record,), gpus=gpus)


def evaluate_sharded(experiment: str | Path, models: list[str], settings: dict, spec: ExecutorSpec) -> EvalSummary:
    """Every model's shard on the executor ``spec``; the summary over what they stored.

    ``settings`` are ``evaluate_experiment``'s keyword arguments (rule, batch_size, device,
    policy, mapping_file, workers, database).
    """
    for model in models:  # a typo fails here, before any shard runs
        check_spec(model)
    expdir = ExperimentDir(experiment)
    definition = expdir.load()  # checks the folder before any shard runs
    shards = [model_shard(expdir, model, settings) for model in models]
    run_shards(shards, spec, desc="evaluations", default_folder=expdir.shards_dir / "submitit")
    runs = [ModelRun(**run) for shard in shards
            for run in json.loads(Path(shard.done_args[0]).read_text(encoding="utf-8"))]
    with ResponseStore(settings.get("database") or expdir.responses_file) as store:
        summary = summarise(definition, store, [r.observer for r in runs], runs)
    expdir.clear_shards()
    return summary
