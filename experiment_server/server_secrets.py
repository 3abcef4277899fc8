"""The server's secrets in a file of their own, readable only by its owner, never in the data.

The experiment folder and its responses.sqlite are data: researchers copy, archive and
share them. The cookie-signing key (whoever has it forges admin cookies), the key behind
trial keys and start tokens, the admin password hash and the completion codes (whoever has
one is paid without taking part) therefore live in a JSON file created with mode 0600:

- ``--secrets FILE``, else the ``CUEBENCH_SECRETS`` environment variable, else
  ``<folder>.secrets.json`` beside the experiment folder (outside it, so a copy of the
  folder holds none of them);
- every server process and host of one study reads the same file (copy it to each host of
  a PostgreSQL study);
- a folder from before this file had them in its database table ``server_settings``: the
  password hash and the completion codes are moved out on the first start, the old key is
  replaced by new keys (any copy of the folder from before holds it), and the database
  forgets them all.

A file others may read is made 0600 with a warning. Writes replace the file atomically (a
new temporary 0600 file, then rename, the folder synced) under a lock file,
so the CLI and a running server may both write; readers reload it when it changes.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from cuebench.errors import CuebenchError

log = logging.getLogger("cuebench.serve")
ENV_VAR = "CUEBENCH_SECRETS"
SUFFIX = ".secrets.json"
KEYS = ("secret_key", "derive_key")
"""The keys: the cookie-signing key and the key of start tokens, start-form nonces and trial
keys. ``cuebench serve rotate-secret`` replaces both (``study.Study.renew_keys``)."""
SECRET_KEYS = (*KEYS, "admin_password", "code_finished", "code_screened_out", "code_failed_attention")
"""What the file holds: the keys, the admin password hash and the completion codes."""


class SecretsError(CuebenchError):
    """The secrets file cannot be read or written, or is not a JSON object."""


def default_secrets_path(expdir: str | Path) -> Path:
    """Where a folder's secrets live unless told otherwise: ``CUEBENCH_SECRETS``, else beside the folder."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    root = Path(expdir).resolve()
    return root.with_name(root.name + SUFFIX)


def new_key() -> str:
    return secrets.token_hex(32)


class ServerSecrets:
    """The secrets file of one study: ``get``, ``set``, ``get_or_create``; re-read whenever it
    changes on disk (the CLI sets a password while the server runs)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._values: dict[str, str] = {}
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        return self._current().get(key)

    def set(self, key: str, value: str) -> None:
        self.update({key: value})

    def get_or_create(self, key: str, make: Callable[[], str]) -> str:
        """A stored secret, created once with ``make()`` when absent."""
        value = self.get(key)
        if value is None:
            with self._file_lock():
                values = self._read()
                if key not in values:
                    self._write({**values, key: make()})
            value = self.get(key)
        return value

    def update(self, changes: dict[str, str], only_missing: bool = False) -> None:
        """Store several secrets in one write; ``only_missing`` keeps those already in the file."""
        with self._file_lock():
            values = self._read()
            if only_missing:
                changes = {k: v for k, v in changes.items() if k not in values}
            if changes:
                self._write({**values, **changes})

    def _current(self) -> dict[str, str]:
        with self._lock:
            stamp = self._stamp_now()
            if stamp != self._stamp:
                self._values, self._stamp = self._read(), stamp
            return self._values

    def _stamp_now(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_ino

    def _read(self) -> dict[str, str]:
        self._owner_only()
        try:
            values = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise SecretsError(f"{self.path}: cannot read the server's secrets ({err})") from None
        if not isinstance(values, dict):
            raise SecretsError(f"{self.path}: expected a JSON object of the server's secrets")
        return values

    def _owner_only(self) -> None:
        """A secrets file others may read (copied without ``-p``, made by hand) is made 0600, with a warning."""
        try:
            mode = stat.S_IMODE(self.path.stat().st_mode)
        except FileNotFoundError:
            return
        if os.name == "posix" and mode & 0o077:
            log.warning("%s was readable by others (mode %o): made 0600; if others could log in here, renew the "
                        "keys (cuebench serve rotate-secret) and the admin password", self.path, mode)
            os.chmod(self.path, 0o600)

    def _write(self, values: dict[str, str]) -> None:
        """A new 0600 file of a name nobody can have prepared (``O_EXCL``, no symlink followed),
        renamed over the old one, the rename made durable by syncing the folder."""
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(values, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            _sync_folder(self.path.parent)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise SecretsError(f"{self.path}: cannot write the server's secrets ({err.strerror})") from None

    @contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Writers one at a time across processes (``fcntl`` where there is one; Windows lab
        PCs run a single waitress process, where the thread lock suffices)."""
        with self._lock:
            try:
                import fcntl
            except ImportError:
                yield
                return
            try:
                fd = os.open(self.path.with_name(f".{self.path.name}.lock"), os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError as err:
                raise SecretsError(f"{self.path}: cannot create the lock beside it ({err.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
            self._stamp = None


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; Windows cannot open a folder for it)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
