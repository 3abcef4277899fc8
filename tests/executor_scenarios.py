"""Shard functions and the Ray scenario the executor tests run (importable by Ray and submitit workers).

``python executor_scenarios.py OUT ADDRESS`` runs, against the Ray head at ADDRESS: the
EED build, its evaluation by two models and the training study of ``test_executors``, plus
a failing and a killed shard, and writes what happened under OUT for the tests to check.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from cuebench.executors import ExecutorError, Shard, ShardsFailed, parse_executor, run_shards

BUILD = ["stimuli", "build", "--design", "cue-decomposition", "--images", "default", "--eed-steps", "4",
         "--shard-size", "4", "--workers", "1"]
STUDY = ["stimuli", "build", "--design", "diagvib", "--diagvib-digits", "sklearn-digits", "--sizes", "60,30,30",
         "--diagvib-human-trials", "2", "--study", "ZSO", "--target", "hue", "--correlated", "shape"]
EVAL = ["eval", "--model", "tf_efficientnet_lite0", "--model", "tf_efficientnet_lite1", "--quiet"]
TRAIN = ["--model", "test_resnet", "--runs", "2", "--epochs", "1", "--input-size", "32", "--batch-size", "16",
         "--device", "cpu"]


def append_line(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")


def finish_once(out: str, log: str, name: str) -> None:
    """A shard's work: log that it ran to the end, then write its result file."""
    append_line(log, name)
    Path(out).write_text(name)


def fail(message: str) -> None:
    raise RuntimeError(message)


def flaky(marker: str, out: str) -> None:
    """Fails the first time (leaving a marker), succeeds on the retry."""
    if not Path(marker).exists():
        Path(marker).write_text("tried")
        raise RuntimeError("transient failure")
    Path(out).write_text("done")


def die_once(marker: str, out: str, log: str, name: str) -> None:
    """The worker process is killed (SIGKILL) mid-shard the first time; the retry finishes."""
    if not Path(marker).exists():
        Path(marker).write_text("killed")
        os.kill(os.getpid(), 9)
    finish_once(out, log, name)


def logged_shard(folder: Path, name: str) -> Shard:
    out = folder / f"{name}.out"
    return Shard(name, finish_once, (str(out), str(folder / "log"), name), done=Path.is_file, done_args=(out,))


def killed_shard(folder: Path) -> Shard:
    out = folder / "killed.out"
    return Shard("killed", die_once, (str(folder / "k"), str(out), str(folder / "log"), "killed"),
                 done=Path.is_file, done_args=(out,))


def ray_scenario(out: Path, address: str) -> None:
    from cuebench.cli import main

    option = ["--executor", "ray", "--executor-option", f"address={address}"]
    results = {}
    results["build"] = main([*BUILD, "--out", str(out / "exp"), *option])
    shutil.copytree(out / "exp", out / "eval")  # the build stays as built, for its own comparison
    results["eval"] = main([*EVAL, "--experiment", str(out / "eval"), *option])
    results["study"] = main([*STUDY, "--out", str(out / "study")])
    results["train"] = main(["train", str(out / "study"), *TRAIN, *option])
    shards_dir = out / "shards"
    shards_dir.mkdir()
    try:
        run_shards([logged_shard(shards_dir, "good"), killed_shard(shards_dir), Shard("broken-shard", fail, ("no such image",))],
                   parse_executor("ray", [f"address={address}", "retries=1"]))
        results["failure"] = "no error"
    except ShardsFailed as err:
        results["failure"] = str(err)
    try:
        run_shards([Shard("s", fail, ("never runs",))], parse_executor("ray", ["address=127.0.0.1:9"]))
        results["unreachable"] = "no error"
    except ExecutorError as err:
        results["unreachable"] = str(err)
    (out / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    ray_scenario(Path(sys.argv[1]), sys.argv[2])
