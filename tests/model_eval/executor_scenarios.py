"""Shard functions and the Ray scenario the executor tests run (importable by Ray and submitit workers).

``python executor_scenarios.py OUT ADDRESS`` runs, against the Ray head at ADDRESS: the
EED build, its evaluation by two models and the training study of ``test_executors``, plus
a failing and a killed shard, and writes what happened under OUT for the tests to check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
    from cuebench_app.cli import main

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


RAY = Path(sys.executable).with_name("ray")


def start_head(port: int, log: Path, **auth: str) -> None:
    """``ray start --head`` on loopback with the given ``RAY_AUTH_*`` variables (none: Ray's own rule). Its
    sessions go where every Ray run of the scenario keeps them: ``$RAY_TMPDIR/ray``, the folder the test removes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")} | auth
    with open(log, "a") as fh:
        subprocess.run([str(RAY), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
                        "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
                       env=env, stdout=fh, stderr=fh, check=True, timeout=120)


def stop_head() -> None:
    """``ray stop``: it stops every Ray process it can see, which in the scenario's own PID namespace
    (``test_executors.in_loopback_namespace``) are only the scenario's."""
    subprocess.run([str(RAY), "stop", "--force"], capture_output=True, timeout=120)


def try_shard(folder: Path, name: str, options: list[str]) -> str:
    """One shard on Ray with these options: "ok", or the error's message."""
    try:
        run_shards([logged_shard(folder, name)], parse_executor("ray", options))
        return "ok" if (folder / f"{name}.out").is_file() else "no result"
    except ExecutorError as err:
        return str(err)


def auth_scenario(out: Path, port: int) -> None:
    """Token authentication as users meet it (HOME is a fresh folder): a private local run, then a
    head started by hand; a token Ray left in ``~/.ray``; a head with a token of its own."""
    address = [f"address=127.0.0.1:{port}"]
    token_home = Path.home() / ".ray" / "auth_token"
    results = {"local": try_shard(out, "local", []), "home_token_after_local": token_home.exists()}
    start_head(port, out / "head.log")
    results["head_after_local"] = try_shard(out, "head-after-local", address)
    stop_head()
    token_home.parent.mkdir(parents=True, exist_ok=True)
    token_home.write_text("0123456789abcdef" * 4)  # what Ray's own local ray.init() leaves behind
    start_head(port, out / "head.log")
    results["head_with_home_token"] = try_shard(out, "head-with-home-token", address)
    stop_head()
    own = out / "cluster_token"
    own.write_text("fedcba9876543210" * 4)
    start_head(port, out / "head.log", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(own))
    results["wrong_token"] = try_shard(out, "wrong-token", address)
    results["token_option"] = try_shard(out, "token-option", [*address, f"auth_token_path={own}"])
    stop_head()
    (out / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1] == "auth":
        auth_scenario(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        ray_scenario(Path(sys.argv[1]), sys.argv[2])
