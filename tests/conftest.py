"""Shared fixtures: the ../shared data (skip on a user's machine, fail under CI) and real photos."""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


HOME_VARIABLES = ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HF_HOME", "TORCH_HOME",
                  "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR")
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")
BLAS_THREADS = "OPENBLAS_NUM_THREADS"
TEMP_VARIABLES = ("TMPDIR", "PYTEST_DEBUG_TEMPROOT")


def pytest_configure(config):
    """A hermetic suite: the user's home folder, caches and Ray settings change no result.

    Everything the tests start (Ray, PostgreSQL, browsers, PsychoPy, subprocesses) inherits a fresh
    ``HOME`` with empty cache and config folders, and no ``RAY_AUTH_*``/``RAY_ADDRESS`` of the user's;
    tests that need one set it themselves; the system temporary folder is the suite's own
    (``suite_temp_dir``), checked at the end for what a test left there. Set before any test module is imported.

    NumPy's and SciPy's OpenBLAS run one thread (unless the user set ``OPENBLAS_NUM_THREADS``): the suite
    keeps both cores of a small machine busy with servers, browsers and documented commands side by side,
    and a threaded BLAS call on a small array then waits for a core (``scipy.stats.gaussian_kde`` of four
    values: 0.7 ms on one thread, 15-55 ms on two threads of a busy 2-core machine).
    """
    config._cuebench_user_env = {key: os.environ.get(key)
                                 for key in (*HOME_VARIABLES, *AUTH_VARIABLES, BLAS_THREADS, *TEMP_VARIABLES)}
    if not hasattr(config, "workerinput"):  # the run's controller (or the one process of a run without xdist)
        config._cuebench_temp = suite_temp_dir()
    home = Path(tempfile.mkdtemp(prefix="cuebench-home-", dir=os.environ.get("PYTEST_DEBUG_TEMPROOT")))
    for key in AUTH_VARIABLES:
        os.environ.pop(key, None)
    os.environ["HOME"] = str(home)
    for key, folder in zip(HOME_VARIABLES[1:], (".cache", ".config", ".local/share", ".cache/huggingface",
                                               ".cache/torch", ".config/matplotlib", ".cache/torchinductor")):
        os.environ[key] = str(home / folder)
    os.environ.setdefault(BLAS_THREADS, "1")
    from threadpoolctl import threadpool_limits

    threadpool_limits(int(os.environ[BLAS_THREADS]), user_api="blas")


def suite_temp_dir() -> Path:
    """The suite's own system temporary folder (``TMPDIR``, inherited by xdist's workers and every process the
    tests start), so that what a test leaves outside its temporary folder is found by
    ``pytest_sessionfinish`` however busy the machine's shared one is. It lies in that shared one (short, for
    Ray's 107-character socket paths; open as /tmp is, for PostgreSQL's own user); pytest's basetemp and the
    suite's home folders stay where they were (``PYTEST_DEBUG_TEMPROOT``)."""
    system = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    # This process's multiprocessing folder (``pymp-*``, for a test that runs a process pool here) is made now, in
    # the shared folder: Python removes it at exit, after ``pytest_sessionfinish`` (workers have exited by then).
    multiprocessing.util.get_temp_dir()
    own = Path(tempfile.mkdtemp(prefix="cb-", dir=system))
    own.chmod(0o1777)
    os.environ["PYTEST_DEBUG_TEMPROOT"], os.environ["TMPDIR"] = system, str(own)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return own


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """A test leaves nothing outside its temporary folder: whatever is left in the suite's own system temporary
    folder (``suite_temp_dir``) once every test and worker is done fails the run, named in the summary; then it
    is removed. Runs in the controller only, after xdist has shut its workers down (trylast)."""
    own = getattr(session.config, "_cuebench_temp", None)
    if own is None:
        return
    left = [entry.name + (f"/ ({sum(p.is_file() for p in entry.rglob('*'))} files)" if entry.is_dir() else "")
            for entry in sorted(own.iterdir())]
    shutil.rmtree(own, ignore_errors=True)
    if left:
        session.config._cuebench_temp_left = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    saved = getattr(config, "_cuebench_user_env", None)
    if saved is None:
        return
    shutil.rmtree(os.environ["HOME"], ignore_errors=True)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None


def shared_root() -> Path | None:
    """``CUEBENCH_SHARED`` or ``../shared`` beside the repository, if it exists."""
    env = os.environ.get("CUEBENCH_SHARED")
    candidate = Path(env) if env else REPO.parent / "shared"
    return candidate if candidate.is_dir() else None


def unavailable(reason: str) -> None:
    """Skip on a developer's machine that lacks something the suite's install provides;
    under CI (``CI=true``), where the README's test command installs it, fail instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}, and CI=true requires it")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared() -> Path:
    root = shared_root()
    if root is None:
        unavailable("../shared (or CUEBENCH_SHARED) is missing: the published data sets are not available")
    return root


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    """scikit-image's real photos, resized to 224x224 by the project's one policy."""
    from stimuli.sources import default_images, fit_to_stimulus

    return {img.name: fit_to_stimulus(img.read()) for img in default_images()}


@pytest.fixture(scope="module")
def chromium():
    """Debian's headless chromium driven by playwright (never a downloaded browser), started once per
    test module: playwright's driver and the browser take seconds to start."""
    if not CHROMIUM.exists():
        unavailable("Debian's chromium (/usr/bin/chromium) is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture()
def browser(chromium):
    """The module's chromium; every page a test opened (each in a context of its own, so no cookies or
    storage are shared) is closed after it, so nothing of one test runs on into the next."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def check_validation_marks(items) -> None:
    """The ``validates`` marks pytest collects on each test are exactly those ``scripts/validation_table.py`` reads
    from its source for docs/validation.md (every field given, as literal strings), so the table lists what the
    suite checks; a mark it could not read stops the collection with the file and line."""
    from validation_table import FIELDS, MarkError, file_rows

    collected: dict[str, set] = {}
    for item in items:
        node = item.nodeid.split("[")[0]  # parametrised tests: one row per test function
        marks = collected.setdefault(node, set())
        for mark in item.iter_markers("validates"):
            fields = dict(zip(FIELDS, mark.args)) | mark.kwargs
            marks.add((*(" ".join(str(fields.get(f, "")).split()) for f in FIELDS), node))
    read: dict[str, set] = {}
    for path in sorted({Path(str(item.fspath)) for item in items}):
        if not path.name.startswith("test_") or not path.is_relative_to(REPO):
            continue
        try:
            for row in file_rows(path, REPO):
                read.setdefault(row.test, set()).add(tuple(vars(row).values()))
        except MarkError as err:
            raise pytest.UsageError(str(err)) from None
    for node, marks in collected.items():
        if marks != read.get(node, set()) and node.split("::")[0].rsplit("/", 1)[-1].startswith("test_"):
            raise pytest.UsageError(
                f"{node}: the validates marks pytest collects differ from those scripts/validation_table.py reads "
                f"from the source; write each as a literal @pytest.mark.validates(statistic, definition=..., "
                f"source=..., reference=..., tolerance=...) decorator on the test or its class")


# Modules that run Ray, one work unit under pytest-xdist (the longest, see LONG_UNITS). Scheduling only: each Ray
# head a test starts lives in PID and network namespaces of its own (``in_loopback_namespace`` in
# tests/model_eval/test_executors.py), so its ``ray stop`` reaches no other Ray instance of the machine.
RAY_MODULES = ("tests/model_eval/test_executors.py", "tests/model_eval/test_training.py", "tests/system/test_docs.py")


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs as a whole: a test's module, or ``ray`` for the Ray modules."""
    module = nodeid.split("::", 1)[0]
    return "ray" if module in RAY_MODULES else module


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is not installed: the suite runs in one process
    LoadScopeScheduling = None

LONG_UNITS = ("ray", "tests/stimuli/test_synthesis.py", "tests/analysis/test_report_robust.py",
              "tests/analysis/test_psychometric.py", "tests/experiment_server/test_server_launch.py",
              "tests/system/test_journey.py", "tests/human_tasks/test_lab_session.py", "tests/stimuli/test_quality.py",
              "tests/system/test_benchmark.py")
"""Work units of a minute or more on 2 cores (the CI log's slowest tests), longest first: they start first, so
the run does not end with one worker busy on a long module while the other waits."""

if LoadScopeScheduling is not None:
    class ModuleScheduling(LoadScopeScheduling):
        """Whole modules per worker (:func:`work_unit`): a module's module- and session-scoped fixtures (a
        browser, a built experiment, the docs runner's pool of every documented block) are made once. The
        :data:`LONG_UNITS` go out first, then the rest by their number of tests (pytest-xdist's order)."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            for unit in reversed(LONG_UNITS):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config, log):
        """``pytest -n N`` (scripts/test.sh) hands out :func:`work_unit` values instead of single tests."""
        if config.getvalue("dist") == "load":
            return ModuleScheduling(config, log)
        return None


def pytest_collection_modifyitems(config, items):
    """Every ``validates`` mark is readable for docs/validation.md (:func:`check_validation_marks`); ``gpu`` tests
    run only where torch sees a CUDA GPU (``pytest -m gpu`` on a GPU machine)."""
    check_validation_marks(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch sees none here")
    for item in gpu_items:
        item.add_marker(skip)


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (``apt-get install postgresql``), newest version."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


class PostgresServer:
    """A PostgreSQL server in a folder of its own, driven by Debian's ``pg_ctl``."""

    def __init__(self, bin_dir: Path, root: Path, port: int = 5432):
        self.bin_dir, self.root, self.port = bin_dir, root, port
        self.data = root / "data"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgresql://cuebench@/postgres?host={root}&port={port}"

    def run(self, tool: str, *args) -> None:
        import subprocess

        subprocess.run([*self.as_user, str(self.bin_dir / tool), *map(str, args)], check=True, capture_output=True)

    def pg_ctl(self, action: str, *args) -> None:
        self.run("pg_ctl", "-D", self.data, "-l", self.root / "server.log", "-w", *args, action)

    def start(self) -> None:
        self.pg_ctl("start", "-o", f"-k {self.root} -c listen_addresses='' -p {self.port} -c max_connections=300")

    def restart(self) -> None:
        """Stop at once (as in a crash, every connection cut) and start again."""
        self.pg_ctl("stop", "-m", "immediate")
        self.start()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server of our own: ``initdb`` into a temporary folder, listening only
    on a Unix socket there, stopped (and its files removed) at the end of the session.
    PostgreSQL refuses to run as root, so under root it runs as the package's ``postgres`` user
    (in a folder of the system's temporary directory, which that user can reach)."""
    import shutil
    import tempfile

    bin_dir = postgres_bin()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (apt-get install postgresql)")
    server = PostgresServer(bin_dir, Path(tempfile.mkdtemp(prefix="cuebench-postgres-")))
    if server.as_user:
        shutil.chown(server.root, "postgres")
    server.run("initdb", "-D", server.data, "-A", "trust", "-U", "cuebench", "--no-sync")
    server.start()
    try:
        yield server
    finally:
        server.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture()
def postgres_url(postgres_server):
    """A fresh, empty database on the session's PostgreSQL server."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.url.replace("/postgres?", f"/{name}?")


@pytest.fixture()
def response_row():
    """``response_row(i, response, observer, **fields)``: a valid response row of experiment "e" (trial ``t<i>``, "cat"
    correct) for the store's own tests, one way for the core's and the stages' tests to write them."""

    def row(i=0, response="cat", observer="p1", **extra):
        return dict(experiment="e", observer=observer, observer_kind="human", session="1", trial_index=i,
                    trial_id=f"t{i}", role="test", response=response, correct=int(response == "cat"), rt_ms=512.5,
                    timing_measured={"stimulus": 200.1}, params={"grid": 3}, level=2) | extra

    return row


@pytest.fixture()
def at_once():
    """``at_once(work, args)``: ``work(arg)`` in a thread per arg, all let go together (a barrier), each given a
    minute; the exceptions they raised, for the test to assert there are none (one raised in a thread would not
    fail it). How the storage tests open and write a database from several writers at once."""
    import threading

    def run(work, args, seconds: float = 60.0) -> list[Exception]:
        barrier, errors = threading.Barrier(len(args)), []

        def start(arg):
            try:
                barrier.wait(seconds)
                work(arg)
            except Exception as err:  # noqa: BLE001 - the test reports every thread's failure
                errors.append(err)

        threads = [threading.Thread(target=start, args=(arg,), daemon=True) for arg in args]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds)
        assert not any(thread.is_alive() for thread in threads), f"a thread of {work.__name__} did not finish"
        return errors

    return run


BLOCK_SECONDS = "docs_block_seconds"
"""The user property a docs-runner test records: its block's own run time (the test's duration also counts
the wait for the pool that runs pages side by side)."""


def pytest_terminal_summary(terminalreporter):
    """Beside pytest's slowest tests, the documented blocks that took longest to run themselves; and what the
    tests left in the system temporary folder (``pytest_sessionfinish``)."""
    left = getattr(terminalreporter.config, "_cuebench_temp_left", None)
    if left:
        terminalreporter.write_sep("=", f"FAILED: the tests left {len(left)} file(s) outside their temporary "
                                        "folders (in the system temporary folder; tmp_path keeps them in basetemp)",
                                   red=True)
        for name in left[:50]:
            terminalreporter.write_line(f"  {name}")
    timed = [(dict(report.user_properties)[BLOCK_SECONDS], report.nodeid)
             for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
             if report.when == "call" and BLOCK_SECONDS in dict(report.user_properties)]
    if timed:
        terminalreporter.write_sep("=", f"slowest documented blocks ({sum(t for t, _ in timed):.0f} s in all)")
        for seconds, nodeid in sorted(timed, reverse=True)[:10]:
            terminalreporter.write_line(f"{seconds:8.2f}s  {nodeid}")


# --- the core's own: what tests/core share without the stages ----------------------------------------------------

WEB_SAMPLE_V1 = REPO / "tests" / "data" / "experiment_v1.json"
"""The web sample (every kind of trial: classify, oddity, practice, attention, catch) as written by schema version 1."""


@pytest.fixture()
def web_sample(tmp_path) -> tuple[Path, "Experiment"]:
    """``tmp_path/exp`` holding the web sample's experiment.json (no images: what the core reads of a study)."""
    from cuebench.trials import Experiment

    root = tmp_path / "exp"
    root.mkdir()
    (root / "experiment.json").write_text(Experiment.load(WEB_SAMPLE_V1).to_json(), encoding="utf-8")
    return root, Experiment.load(root / "experiment.json")


@pytest.fixture()
def core_command():
    """``cuebench schema|export|labels ...`` as the command runs them (exit status 2 and one line on an error),
    parsed by the core's own ``register``: the app layer's ``main`` would import every stage."""
    import argparse

    from cuebench.contract_cli import register as register_core_commands
    from cuebench.errors import CuebenchError

    def run(*args: str) -> int:
        parser = argparse.ArgumentParser(prog="cuebench")
        register_core_commands(parser.add_subparsers(dest="command", required=True))
        parsed = parser.parse_args(args)
        try:
            return int(parsed.func(parsed) or 0)
        except CuebenchError as err:
            print(f"cuebench {parsed.command}: error: {err}", file=sys.stderr)
            return 2

    return run
