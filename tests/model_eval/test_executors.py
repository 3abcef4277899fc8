"""The executor layer on real engines: a Ray head started here and submitit's local executor.

Every job kind (a training study, an EED stimulus build) gives the same results whichever
executor ran it; failures name the shard and keep what finished; a killed worker's shard
runs again and its results land once.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import unavailable
from executor_scenarios import BUILD, EVAL, STUDY, TRAIN, fail, flaky, logged_shard

from cuebench_app.cli import main
from cuebench.executors import (ExecutorError, ExecutorSpec, Shard, ShardsFailed, parse_executor, ray_auth_environment,
                                run_shards)
from cuebench.responses import ResponseStore

REPO = Path(__file__).resolve().parents[2]


def shard(tmp: Path, name: str) -> Shard:
    return logged_shard(tmp, name)


# -- options and the local executor ---------------------------------------------------------------------------

def test_executor_options_are_checked_by_name():
    with pytest.raises(ExecutorError, match="unknown executor 'dask'"):
        parse_executor("dask")
    with pytest.raises(ExecutorError, match="'adress' is not an option of the ray executor"):
        parse_executor("ray", ["adress=127.0.0.1:1"])
    with pytest.raises(ExecutorError, match="must be KEY=VALUE"):
        parse_executor("local", ["workers"])
    with pytest.raises(ExecutorError, match="workers='two': expected int"):
        parse_executor("local", ["workers=two"])
    spec = parse_executor("submitit", ["slurm_partition=gpu", "gpus_per_node=1", "cluster=local"])
    assert spec.options == {"slurm_partition": "gpu", "gpus_per_node": 1, "cluster": "local"}


def test_local_shards_retry_report_by_name_and_keep_finished(tmp_path):
    good = shard(tmp_path, "good")
    retried = Shard("flaky", flaky, (str(tmp_path / "m"), str(tmp_path / "flaky.out")),
                    done=Path.is_file, done_args=(tmp_path / "flaky.out",))
    broken = Shard("broken-shard", fail, ("the image folder vanished",))
    with pytest.raises(ShardsFailed, match="broken-shard: RuntimeError: the image folder vanished") as err:
        run_shards([good, retried, broken], ExecutorSpec("local", {"retries": 1}))
    assert "2 finished, their results are kept" in str(err.value)
    assert (tmp_path / "good.out").is_file() and (tmp_path / "flaky.out").is_file()
    run_shards([good, retried])  # finished shards are skipped
    assert (tmp_path / "log").read_text().splitlines() == ["good"]


def test_unknown_executor_option_on_the_command_line(tmp_path, capsys):
    argv = ["stimuli", "build", "--design", "cue-decomposition", "--out", str(tmp_path / "x"),
            "--executor", "ray", "--executor-option", "nodes=3"]
    assert main(argv) == 2
    assert "'nodes' is not an option of the ray executor" in capsys.readouterr().err


# -- a real Ray head ----------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NAMESPACES = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]


@functools.cache
def namespace_command() -> list[str] | None:
    """``unshare`` into a network namespace and a PID namespace with its own ``/proc``, as this user may make
    them: directly as root, otherwise inside a user namespace of its own (``--map-root-user``); None where
    neither works here (no util-linux, or namespaces barred by the machine)."""
    if shutil.which("unshare") is None:
        return None
    for user in ([], ["--map-root-user"]):
        command = ["unshare", *user, *NAMESPACES, "--"]
        if subprocess.run([*command, "true"], capture_output=True, timeout=60).returncode == 0:
            return command
    return None


def pid_namespace_members(namespace: str) -> list[int]:
    """The processes of this machine in the PID namespace ``namespace`` (``pid:[inode]``, as ``/proc/PID/ns/pid``
    names it)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "pid") == namespace:
                members.append(int(entry.name))
        except OSError:  # the process ended meanwhile
            pass
    return members


def in_loopback_namespace(script: str, home: Path, timeout: int = 1200, **env: str) -> None:
    """Run a bash script inside a network namespace that has only the loopback interface (Ray
    binds every interface it finds; there it finds only 127.0.0.1) and a PID namespace of its own, with
    ``HOME`` in a fresh folder so nothing Ray keeps in a user's home changes the result.

    The PID namespace is what keeps the machine's other Ray instances out of reach: ``ray stop`` stops every
    Ray process it can see (Ray 2.60 has no option to stop one head), and in here, with its own ``/proc``, it
    sees only the scenario's. The scenario's Ray is stopped by the namespace's end: when the script exits
    (or, past ``timeout``, is killed: ``--kill-child``) the kernel kills every process left in it, which is
    checked. The temporary folder (``TMPDIR`` and ``RAY_TMPDIR``: every head's and local run's sessions,
    and whatever else a killed process left) is removed."""
    pytest.importorskip("ray", reason="the 'scale' extra (ray) is not installed")
    unshare = namespace_command()
    if unshare is None or shutil.which("ip") is None:
        unavailable("unshare and ip (util-linux, iproute2) with network and PID namespaces are needed to keep "
                    "the Ray head on loopback and apart from the machine's other Ray instances")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    paths = [str(REPO), str(Path(__file__).parent), os.environ.get("PYTHONPATH")]  # executor_scenarios.py
    temp = Path(tempfile.mkdtemp(prefix="ray"))  # short: Ray's socket paths must fit 107 characters
    namespace = temp / "pid-namespace"
    wrapped = f"readlink /proc/self/ns/pid >{shlex.quote(str(namespace))} && ip link set lo up && {{ {script}; }}"
    full_env = {**clean, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": str(temp),
                "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(filter(None, paths)), **env}
    try:
        done = subprocess.run([*unshare, "bash", "-c", wrapped], env=full_env, timeout=timeout,
                              capture_output=True, text=True)
        assert done.returncode == 0, f"Ray scenario failed:\n{done.stderr[-4000:]}"
        ours = namespace.read_text().strip()
        assert ours != os.readlink("/proc/self/ns/pid"), "the Ray scenario ran in this machine's PID namespace"
        assert pid_namespace_members(ours) == [], "processes of the Ray scenario outlived it"
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def other_ray(tmp_path_factory):
    """Another Ray instance's processes on this machine, as ``ray stop`` finds them: a ``raylet`` and a
    ``gcs_server`` by process name, a worker by the ``default_worker.py`` in its command line; each in a session
    of its own and ending by itself within the hour. The Ray scenarios here must leave them running."""
    folder = tmp_path_factory.mktemp("other-ray")
    worker = folder / "default_worker.py"
    worker.write_text("import time\ntime.sleep(3600)\n")
    commands = [[sys.executable, str(worker)]]
    for name in ("raylet", "gcs_server"):
        (folder / name).symlink_to(shutil.which("sleep"))  # the process name is the link's
        commands.append([str(folder / name), "3600"])
    processes = [subprocess.Popen(command, start_new_session=True) for command in commands]
    yield processes
    for process in processes:
        process.kill()
        process.wait(timeout=60)


def still_running(processes: list[subprocess.Popen]) -> list[bool]:
    return [process.poll() is None for process in processes]


def test_a_ray_scenario_past_its_time_leaves_no_process(tmp_path):
    """A scenario killed at its timeout takes along what it left running in sessions of their own, as
    ``ray start`` leaves a head's processes (``--kill-child``: the namespace ends with its first process)."""
    namespace = tmp_path / "pid-namespace"
    script = f"readlink /proc/self/ns/pid >{shlex.quote(str(namespace))}; setsid -f sleep 600; setsid -f sleep 600; " \
             "sleep 600"
    with pytest.raises(subprocess.TimeoutExpired):
        in_loopback_namespace(script, tmp_path / "home", timeout=3)
    ours, deadline = namespace.read_text().strip(), time.monotonic() + 30
    while pid_namespace_members(ours) and time.monotonic() < deadline:  # the kernel kills them as unshare ends
        time.sleep(0.1)
    assert pid_namespace_members(ours) == []


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory, other_ray):
    """``ray start --head`` with 2 CPUs and token authentication on (a generated token, given to the
    driver through ``RAY_AUTH_TOKEN_PATH``), then the scenario's driver; every step bounded in time. Another
    Ray instance runs on the machine meanwhile (``other_ray``)."""
    out = tmp_path_factory.mktemp("ray")
    token = out / "token"
    token.write_text(secrets.token_hex(32))
    ray = Path(sys.executable).with_name("ray")
    port = free_port()
    head = (f"RAY_AUTH_MODE=token {ray} start --head --node-ip-address=127.0.0.1 --port={port} --num-cpus=2 "
            f"--num-gpus=0 --include-dashboard=false --disable-usage-stats")
    script = (f"{head} >{out}/head.log 2>&1 && "
              f"timeout 900 {sys.executable} {Path(__file__).with_name('executor_scenarios.py')} {out} 127.0.0.1:{port}")
    in_loopback_namespace(script, tmp_path_factory.mktemp("home"), RAY_AUTH_TOKEN_PATH=str(token))
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_ray_token_authentication_as_users_meet_it(tmp_path, other_ray):
    """A local run leaves nothing that breaks a later head run; a token Ray left in the home folder is
    used; a head's own token is given with auth_token_path, and a refused one is named in one line. Its three
    heads are each stopped with ``ray stop``, which leaves the machine's other Ray instance running."""
    script = f"timeout 600 {sys.executable} {Path(__file__).with_name('executor_scenarios.py')} auth {tmp_path} {free_port()}"
    in_loopback_namespace(script, tmp_path / "home", timeout=700)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["local"] == "ok" and results["home_token_after_local"] is False
    assert results["head_after_local"] == "ok"
    assert results["head_with_home_token"] == "ok"
    assert results["token_option"] == "ok"
    refused = results["wrong_token"]
    assert "uses token authentication and refused the token from" in refused and "auth_token_path=FILE" in refused
    assert "\n" not in refused
    assert still_running(other_ray) == [True, True, True]


def test_ray_auth_environment_follows_ray_precedence(tmp_path, monkeypatch):
    """Which RAY_AUTH_* variables the driver runs with, for each way a user can give a token."""
    monkeypatch.setenv("HOME", str(tmp_path))
    address = parse_executor("ray", ["address=127.0.0.1:6379"])
    assert ray_auth_environment(address, {}) == {"RAY_AUTH_MODE": "disabled"}
    local = ray_auth_environment(parse_executor("ray"), {})
    assert local["RAY_AUTH_MODE"] == "token" and len(local["RAY_AUTH_TOKEN"]) == 64 and "RAY_AUTH_TOKEN_PATH" not in local
    assert ray_auth_environment(address, {"RAY_AUTH_TOKEN": "abc"}) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "abc"}
    assert ray_auth_environment(address, {"RAY_AUTH_MODE": "disabled"}) == {"RAY_AUTH_MODE": "disabled"}
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    assert ray_auth_environment(address, {}) == {"RAY_AUTH_MODE": "token",
                                                 "RAY_AUTH_TOKEN_PATH": str(tmp_path / ".ray" / "auth_token")}
    given = tmp_path / "cluster.token"
    given.write_text("s" * 32)
    with_path = parse_executor("ray", ["address=127.0.0.1:6379", f"auth_token_path={given}"])
    assert ray_auth_environment(with_path, {"RAY_AUTH_TOKEN": "abc"}) == {"RAY_AUTH_MODE": "token",
                                                                         "RAY_AUTH_TOKEN_PATH": str(given)}
    given.write_text("\n")
    with pytest.raises(ExecutorError, match="auth_token_path=.*the file is empty"):
        ray_auth_environment(with_path, {})
    missing = parse_executor("ray", ["address=127.0.0.1:6379", f"auth_token_path={tmp_path / 'nope'}"])
    with pytest.raises(ExecutorError, match="cannot read the token"):
        ray_auth_environment(missing, {})


@pytest.mark.slow
def test_ray_failures_name_the_shard_and_a_killed_worker_is_rerun(ray_run):
    out, results = ray_run
    assert "broken-shard: RuntimeError: no such image" in results["failure"]
    assert "2 finished, their results are kept" in results["failure"]
    assert (out / "shards" / "k").read_text() == "killed"  # the first attempt's worker did die
    assert sorted((out / "shards" / "log").read_text().splitlines()) == ["good", "killed"]  # each finished once
    assert "address=127.0.0.1:9: no Ray head reachable there" in results["unreachable"]


@pytest.mark.slow
def test_a_ray_head_started_here_is_stopped_alone(ray_run, other_ray):
    """The head and its workers are gone (checked in ``in_loopback_namespace``); the Ray instance that ran
    beside it is not."""
    assert still_running(other_ray) == [True, True, True]


# -- the jobs themselves, on each engine -----------------------------------------------------------------------

def build_cue_decomposition(out: Path, *executor: str) -> Path:
    assert main([*BUILD, "--out", str(out), *executor]) == 0
    return out


def experiment_without_command(expdir: Path) -> str:
    data = json.loads((expdir / "experiment.json").read_text())
    data["provenance"].pop("command", None)
    data.pop("name")
    return json.dumps(data, sort_keys=True)


@pytest.fixture(scope="module")
def local_build(tmp_path_factory):
    return build_cue_decomposition(tmp_path_factory.mktemp("local") / "exp")


def assert_same_build(ours: Path, local: Path) -> None:
    assert sorted(p.name for p in (ours / "stimuli").iterdir()) == sorted(p.name for p in (local / "stimuli").iterdir())
    for path in (local / "stimuli").iterdir():
        assert (ours / "stimuli" / path.name).read_bytes() == path.read_bytes()
    assert experiment_without_command(ours) == experiment_without_command(local)
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in local.iterdir())  # no shard records left


def evaluate(expdir: Path, *executor: str) -> list[dict]:
    """Two models answer the experiment; its response rows (without the time they were stored)."""
    assert main([*EVAL, "--experiment", str(expdir), *executor]) == 0
    return response_rows(expdir)


def response_rows(expdir: Path) -> list[dict]:
    with ResponseStore(expdir / "responses.sqlite") as store:
        rows = [{k: v for k, v in row.items() if k != "created_at"} for row in store.rows()]
    return sorted(rows, key=lambda row: (row["observer"], row["trial_id"]))


def assert_same_rows(ours: list[dict], local: list[dict]) -> None:
    """The same rows, each once; class probabilities equal to their stored 6 digits, give or take the last
    (a shard's worker runs torch on one thread, this process on all cores: sums round differently)."""
    assert len(ours) == len(local)
    for mine, theirs in zip(ours, local):
        assert {k: v for k, v in mine.items() if k != "model_outputs"} == \
            {k: v for k, v in theirs.items() if k != "model_outputs"}
        assert mine["model_outputs"] == pytest.approx(theirs["model_outputs"], rel=1e-5, abs=1e-9)


@pytest.fixture(scope="module")
def local_eval(local_build, tmp_path_factory):
    return evaluate(shutil.copytree(local_build, tmp_path_factory.mktemp("eval-local") / "exp"))


def build_study(study: Path) -> Path:
    assert main([*STUDY, "--out", str(study)]) == 0
    return study


RESULT_COLUMNS = ["job_id", "epoch", "split", "accuracy", "per_class_accuracy", "n_images", "train_loss"]


def train_study(study: Path, *executor: str) -> pd.DataFrame:
    assert main(["train", str(study), *TRAIN, *executor]) == 0
    return training_table(study)


def training_table(study: Path) -> pd.DataFrame:
    table = pd.read_csv(study / "training.csv")
    return table[RESULT_COLUMNS].sort_values(["job_id", "split"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_training(tmp_path_factory):
    return train_study(build_study(tmp_path_factory.mktemp("train-local") / "study"))


@pytest.mark.slow
def test_ray_builds_and_trains_as_the_local_executor(ray_run, local_build, local_training):
    out, results = ray_run
    assert (results["build"], results["study"], results["train"]) == (0, 0, 0)
    assert_same_build(out / "exp", local_build)
    pd.testing.assert_frame_equal(training_table(out / "study"), local_training, check_exact=False, atol=1e-4)


@pytest.mark.slow
def test_ray_evaluates_as_the_local_executor(ray_run, local_eval):
    """Two models x one experiment, one shard each: the same rows, each once, no shard records left."""
    out, results = ray_run
    assert results["eval"] == 0
    assert_same_rows(response_rows(out / "eval"), local_eval)
    assert not (out / "eval" / ".shards").exists()


@pytest.fixture()
def importable_scenarios(monkeypatch):
    """submitit's local jobs are fresh Python processes: let them import the scenario module."""
    pytest.importorskip("submitit", reason="the 'scale' extra (submitit) is not installed")
    paths = [str(REPO), str(Path(__file__).parent), os.environ.get("PYTHONPATH")]  # executor_scenarios.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))


@pytest.mark.slow
def test_submitit_local_executor_builds_and_trains_as_the_local_executor(tmp_path, local_build, local_training,
                                                                         importable_scenarios):
    option = ["--executor", "submitit", "--executor-option", "cluster=local", "--executor-option", "timeout_min=20"]
    ours = build_cue_decomposition(tmp_path / "exp", *option)
    assert_same_build(ours, local_build)
    table = train_study(build_study(tmp_path / "study"), *option)
    pd.testing.assert_frame_equal(table, local_training, check_exact=False, atol=1e-4)
    assert list((tmp_path / "study" / "training" / "submitit").glob("*_result.pkl"))  # real result files


@pytest.mark.slow
def test_submitit_failed_shard_is_named(tmp_path, importable_scenarios):
    good = shard(tmp_path, "good")
    broken = Shard("broken-shard", fail, ("disk full",))
    spec = parse_executor("submitit", ["cluster=local", "retries=0", f"folder={tmp_path / 'jobs'}"])
    with pytest.raises(ShardsFailed, match="broken-shard"):
        run_shards([good, broken], spec)
    assert (tmp_path / "good.out").is_file()


@pytest.mark.slow
def test_submitit_local_executor_evaluates_as_the_local_executor(tmp_path, local_build, local_eval,
                                                                 importable_scenarios):
    expdir = shutil.copytree(local_build, tmp_path / "exp")
    option = ["--executor", "submitit", "--executor-option", "cluster=local", "--executor-option", "timeout_min=20"]
    assert_same_rows(evaluate(expdir, *option), local_eval)
    assert not (expdir / ".shards").exists()  # shard records and submitit's job files are gone; the decoded cache stays
