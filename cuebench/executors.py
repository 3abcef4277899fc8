"""Where expensive work runs: this process, a Ray cluster, or Slurm through submitit.

Work is cut into idempotent **shards**. A shard is a module-level function with its
arguments (so it pickles to any worker), a name that says what it is, and a ``finished``
check that looks at the shard's output files. Whichever executor runs a shard, it writes
its results into the experiment (or study) directory exactly as a local run would, so a
re-run skips finished shards, a killed worker's shard is simply run again, and the final
outputs do not depend on the executor. A shard that raises is retried a bounded number of
times; shards that still fail are reported by name with their cause, after every other
shard has finished (finished shards stay).

Ray and submitit are optional (``pip install cuebench[scale]``) and imported only when chosen.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import secrets
import socket
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from .errors import CuebenchError

EXECUTORS = ("local", "ray", "submitit")
DEFAULT_RETRIES = 2
RAY_OPTIONS = {"address": str, "auth_token_path": str, "num_cpus": float, "num_gpus": float, "retries": int}
LOCAL_OPTIONS = {"workers": int, "retries": int}
SUBMITIT_OWN_OPTIONS = {"folder": str, "cluster": str, "retries": int}
"""Every other submitit option (``timeout_min``, ``slurm_partition``, ``gpus_per_node``,
``cpus_per_task``, ``mem_gb``, ``slurm_account``, ...) goes to ``AutoExecutor.update_parameters``."""


class ExecutorError(CuebenchError):
    """An executor cannot be used as asked (unknown option, engine missing or unreachable)."""


class ShardsFailed(ExecutorError):
    """Some shards failed after their retries; the others finished and their results stay."""

    def __init__(self, failures: dict[str, str], finished: int):
        self.failures = failures
        lines = "\n".join(f"  {name}: {cause}" for name, cause in failures.items())
        super().__init__(f"{len(failures)} shard(s) failed ({finished} finished, their results are kept; "
                         f"re-run the same command to retry only the failed ones):\n{lines}")


@dataclass(frozen=True)
class Shard:
    """One idempotent piece of work: ``fn(*args)`` writes its results; ``finished()`` checks for them."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    done: Callable[..., bool] | None = None
    done_args: tuple = ()
    gpus: float = 0.0

    def finished(self) -> bool:
        return bool(self.done and self.done(*self.done_args))

    def run(self) -> None:
        self.fn(*self.args)


@dataclass(frozen=True)
class ExecutorSpec:
    """``--executor NAME`` and its ``--executor-option KEY=VALUE`` pairs, checked before any work."""

    name: str = "local"
    options: dict = field(default_factory=dict)

    @property
    def retries(self) -> int:
        return int(self.options.get("retries", DEFAULT_RETRIES))


def parse_executor(name: str, pairs: list[str] | tuple[str, ...] = ()) -> ExecutorSpec:
    """The executor and its options, with every unknown name or malformed option refused by name."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    known = {"local": LOCAL_OPTIONS, "ray": RAY_OPTIONS, "submitit": None}[name]
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ExecutorError(f"--executor-option {pair!r} must be KEY=VALUE")
        if known is not None and key not in known:
            raise ExecutorError(f"--executor-option {key!r} is not an option of the {name} executor; "
                                f"known: {', '.join(known)}")
        kind = (known or SUBMITIT_OWN_OPTIONS).get(key)
        try:
            options[key] = kind(value) if kind else _guess_type(value)
        except ValueError:
            raise ExecutorError(f"--executor-option {key}={value!r}: expected {kind.__name__}") from None
    if "retries" in options and options["retries"] < 0:
        raise ExecutorError(f"--executor-option retries must be >= 0, got {options['retries']}")
    return ExecutorSpec(name, options)


def _guess_type(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def run_shards(shards: list[Shard], spec: ExecutorSpec = ExecutorSpec(), desc: str = "shards",
               default_folder: Path | None = None) -> None:
    """Run the shards that have not finished on the chosen executor, with bounded retries.

    ``default_folder`` is where submitit keeps its job files unless ``folder=`` is given
    (shared storage on a cluster: normally beside the outputs).
    """
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        raise ExecutorError("shard names must be unique; two shards would write the same results")
    todo = [s for s in shards if not s.finished()]
    if not todo:
        return
    runner = {"local": _run_local, "ray": _run_ray, "submitit": _run_submitit}[spec.name]
    failures: dict[str, str] = {}
    with tqdm(total=len(shards), initial=len(shards) - len(todo), desc=f"{desc} ({spec.name})",
              unit="shard") as bar:
        runner(todo, spec, bar, failures, default_folder)
    unfinished = [s.name for s in todo if s.name not in failures and not s.finished()]
    for name in unfinished:
        failures[name] = "the shard returned but its results are missing"
    if failures:
        raise ShardsFailed(failures, len(shards) - len(failures))


def _cause(err: BaseException) -> str:
    cause = getattr(err, "cause", None)
    err = cause if isinstance(cause, BaseException) else err
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _run_local(todo: list[Shard], spec: ExecutorSpec, bar, failures: dict, _folder) -> None:
    workers = max(1, min(int(spec.options.get("workers", 1)), len(todo)))
    attempts = {s.name: 0 for s in todo}
    if workers == 1:
        for shard in todo:
            while True:
                attempts[shard.name] += 1
                try:
                    shard.run()
                    break
                except CuebenchError as err:
                    failures[shard.name] = _cause(err)  # bad input: a retry would fail the same way
                    break
                except Exception as err:  # noqa: BLE001 - any failure of user work is reported by shard name
                    if attempts[shard.name] > spec.retries:
                        failures[shard.name] = _cause(err)
                        break
            bar.update(1)
        return
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending = {pool.submit(shard.run): shard for shard in todo}
        while pending:
            for fut in as_completed(list(pending)):
                shard = pending.pop(fut)
                attempts[shard.name] += 1
                err = fut.exception()
                if err is None:
                    bar.update(1)
                elif attempts[shard.name] > spec.retries or isinstance(err, CuebenchError):
                    failures[shard.name] = _cause(err)
                    bar.update(1)
                else:
                    pending[pool.submit(shard.run)] = shard
                break


def _optional(module: str, executor: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExecutorError(f"--executor {executor} needs the '{module}' package, which is not installed "
                            f"(pip install 'cuebench[scale]'); or use --executor local") from None


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, naming the address, when nothing listens at a Ray head's HOST:PORT."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep:
        raise ExecutorError(f"--executor-option address={address}: expected HOST:PORT of a Ray head")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as err:
        raise ExecutorError(f"--executor-option address={address}: no Ray head reachable there ({err}); "
                            "start one with 'ray start --head' or leave address out to start a local Ray") from None


def _run_shard(shard: Shard) -> None:
    shard.run()


RAY_AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RAY_TOKEN_HELP = ("give this driver the head's token: --executor-option auth_token_path=FILE, or RAY_AUTH_TOKEN / "
                  "RAY_AUTH_TOKEN_PATH in the environment (on the head, 'ray get-auth-token' prints it); "
                  "docs/scale.md, 'A cluster with token authentication'")


def default_ray_token() -> Path:
    """Where Ray keeps a token it generated (``ray get-auth-token --generate``, a local ``ray.init()``)."""
    return Path.home() / ".ray" / "auth_token"


def ray_auth_environment(spec: ExecutorSpec, environ=os.environ) -> dict[str, str]:
    """The ``RAY_AUTH_*`` variables this driver runs with (Ray >= 2.52 token authentication).

    With ``address``: a token given by ``auth_token_path``, by ``RAY_AUTH_TOKEN(_PATH)``, or
    left by Ray in ``~/.ray/auth_token`` is presented (``ray start --head`` turns token
    authentication on by itself when that file exists, and a head without authentication
    ignores a token), unless ``RAY_AUTH_MODE`` says otherwise. Without ``address``, the
    private local instance gets a token of its own in the environment, so nothing is written
    into the home folder that would change how a later ``address=`` run behaves.
    """
    given = {key: environ[key] for key in RAY_AUTH_VARIABLES if environ.get(key)}
    path = spec.options.get("auth_token_path")
    if path:
        token_file = Path(path).expanduser().resolve()
        try:
            if not token_file.read_text(encoding="utf-8").strip():
                raise ExecutorError(f"--executor-option auth_token_path={path}: the file is empty")
        except (OSError, UnicodeDecodeError) as err:
            raise ExecutorError(f"--executor-option auth_token_path={path}: cannot read the token ({err})") from None
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    if "RAY_AUTH_MODE" in given:
        return given
    if "RAY_AUTH_TOKEN" in given or "RAY_AUTH_TOKEN_PATH" in given:
        return {**given, "RAY_AUTH_MODE": "token"}
    if not spec.options.get("address"):
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    if default_ray_token().is_file():
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(default_ray_token())}
    return {"RAY_AUTH_MODE": "disabled"}


@contextlib.contextmanager
def ray_auth(settings: dict[str, str]):
    """The driver's ``RAY_AUTH_*`` variables for the run (its local workers inherit them), restored after."""
    saved = {key: os.environ.get(key) for key in RAY_AUTH_VARIABLES}
    for key in RAY_AUTH_VARIABLES:
        os.environ.pop(key, None)
    os.environ.update(settings)
    _refresh_ray_config()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _refresh_ray_config()


def _refresh_ray_config() -> None:
    """Ray caches its configuration and token per process; make it read the variables again."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # a Ray before token authentication: nothing to refresh
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _token_of(settings: dict[str, str]) -> str | None:
    if settings.get("RAY_AUTH_MODE") != "token":
        return None
    if settings.get("RAY_AUTH_TOKEN"):
        return settings["RAY_AUTH_TOKEN"].strip()
    return Path(settings["RAY_AUTH_TOKEN_PATH"]).read_text(encoding="utf-8").strip()


def check_ray_token(address: str, settings: dict[str, str], timeout: float = 10.0) -> None:
    """Ask the head's GCS for its cluster id with this driver's token, so a refused token is one
    line naming token authentication, not ``ray.init``'s 20 s of retries and a bare ConnectionError."""
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # a Ray without these internals: ray.init reports the failure itself
        return
    token = _token_of(settings)
    metadata = [("authorization", f"Bearer {token}")] if token else []
    with grpc.insecure_channel(address.removeprefix("ray://")) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=metadata)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAUTHENTICATED:
                return
            source = settings.get("RAY_AUTH_TOKEN_PATH") or ("RAY_AUTH_TOKEN" if token else None)
            refused = f"refused the token from {source}" if source else "needs a token and none was given"
            raise ExecutorError(f"Ray head at {address} uses token authentication and {refused}; "
                                f"{RAY_TOKEN_HELP}") from None


def _run_ray(todo: list[Shard], spec: ExecutorSpec, bar, failures: dict, _folder) -> None:
    ray = _optional("ray", "ray")
    address = spec.options.get("address")
    if address:
        check_reachable(address)
    if ray.is_initialized():
        _submit_to_ray(ray, todo, spec, bar, failures)
        return
    settings = ray_auth_environment(spec)
    with ray_auth(settings):
        if address:
            check_ray_token(address, settings)
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, RuntimeError) as err:
            hint = f"; if the head uses token authentication, {RAY_TOKEN_HELP}" if address else ""
            raise ExecutorError(f"Ray at {address or 'a new local instance'}: {err}{hint}") from None
        try:
            _submit_to_ray(ray, todo, spec, bar, failures)
        finally:
            ray.shutdown()  # a private local instance ends with the command; a cluster is only left


def _submit_to_ray(ray, todo: list[Shard], spec: ExecutorSpec, bar, failures: dict) -> None:
    cpus = float(spec.options.get("num_cpus", 1))
    attempts = {s.name: 0 for s in todo}

    def submit(shard: Shard):
        attempts[shard.name] += 1
        gpus = float(spec.options.get("num_gpus", shard.gpus))
        # max_retries: Ray itself re-runs a shard whose worker died; retry_exceptions stays off
        # so that a shard that raises is counted here, against the same bound.
        remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=spec.retries)(_run_shard)
        return remote.options(name=shard.name).remote(shard)

    pending = {submit(shard): shard for shard in todo}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        ref = done[0]
        shard = pending.pop(ref)
        try:
            ray.get(ref)
            bar.update(1)
        except Exception as err:  # noqa: BLE001 - Ray wraps the shard's own exception
            if attempts[shard.name] > spec.retries or isinstance(getattr(err, "cause", None), CuebenchError):
                failures[shard.name] = _cause(err)
                bar.update(1)
            else:
                pending[submit(shard)] = shard


def _run_submitit(todo: list[Shard], spec: ExecutorSpec, bar, failures: dict, folder: Path | None) -> None:
    submitit = _optional("submitit", "submitit")
    options = dict(spec.options)
    folder = options.pop("folder", None) or folder or Path("submitit")
    cluster = options.pop("cluster", None)
    options.pop("retries", None)
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    try:
        executor.update_parameters(**{"timeout_min": 240, **options})
    except (TypeError, ValueError, NameError) as err:
        raise ExecutorError(f"--executor-option for submitit: {err}") from None
    attempts = {s.name: 0 for s in todo}

    def submit(shard: Shard):
        attempts[shard.name] += 1
        executor.update_parameters(name=shard.name)
        return executor.submit(_run_shard, shard)

    pending = [(submit(shard), shard) for shard in todo]
    while pending:
        job, shard = pending.pop(0)
        try:
            job.result()
            bar.update(1)
        except Exception as err:  # noqa: BLE001 - submitit re-raises the shard's error as FailedJobError
            if attempts[shard.name] > spec.retries:
                failures[shard.name] = _cause(err)
                bar.update(1)
            else:
                pending.append((submit(shard), shard))


def add_executor_arguments(parser, what: str) -> None:
    """``--executor`` and ``--executor-option``, the same on every command that shards work."""
    group = parser.add_argument_group("where the work runs (docs/scale.md)")
    group.add_argument("--executor", default="local", choices=EXECUTORS,
                       help=f"run the {what} here, on a Ray cluster, or on Slurm through submitit")
    group.add_argument("--executor-option", action="append", default=[], metavar="KEY=VALUE",
                       help="local: workers, retries; ray: address=HOST:PORT, auth_token_path=FILE, num_cpus, num_gpus, "
                            "retries; "
                            "submitit: folder, cluster (slurm|local|debug), retries and any AutoExecutor "
                            "parameter (timeout_min, slurm_partition, gpus_per_node, cpus_per_task, mem_gb, ...)")
