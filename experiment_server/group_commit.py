"""Group commit of trial answers: many requests, one transaction, one fsync.

Every answer must be durable before the server says 201, and with ``synchronous=FULL``
each commit costs an fsync, the dominant cost of a trial POST. When participants arrive
together their answers queue; the request that gets the commit turn writes every answer
queued so far (and renews their reservations) in one transaction, and each waiting
request returns once the transaction holding its answer has committed. When the database
refuses the batch, its answers are written again one transaction each: whatever one
request carries can fail that request only, never its neighbours in the batch. An answer whose
session was erased meanwhile (``cuebench withdraw``) is refused inside the transaction that would
store it, so an answer on its way during a withdrawal is not stored after it. No background
thread: the waiting requests take turns committing, so a forked server process
(gunicorn) needs nothing restarted.
"""

from __future__ import annotations

import threading
from typing import Callable

from cuebench.responses import ResponseConflict, ResponseStore, WriteResult, normalise
from cuebench.storage import Database, StorageError

from .db import ServerDB, SessionWithdrawn

MAX_BATCH = 512
"""Answers per transaction at most; keeps one commit short when a burst queues thousands."""


class _Pending:
    def __init__(self, row: dict, observer: str):
        self.row = row
        self.observer = observer
        self.done = threading.Event()
        self.outcome: WriteResult | BaseException | None = None


class GroupCommit:
    """Writes answers in shared transactions into the store ``open_store()`` gives (opened again
    when its connection breaks); ``renew(codes, conn)`` runs in the same transaction, so an
    answer and its participant's reservation renewal commit together."""

    def __init__(self, open_store: Callable[[], ResponseStore], renew: Callable[[list[str], Database], None]):
        self.open_store = open_store
        self.store = open_store()
        self.renew = renew
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()

    def write(self, row: dict, observer: str) -> WriteResult:
        """Store one answer (the rules of ``ResponseStore.write``); returns after it is committed.

        Raises ``ResponseConflict`` when a different answer is stored under its key."""
        pending = _Pending(normalise(row), observer)
        with self._queue_lock:
            self._queue.append(pending)
        while not pending.done.is_set():
            with self._commit_lock:
                if not pending.done.is_set():
                    self._commit_queued()
        if isinstance(pending.outcome, BaseException):
            raise pending.outcome
        return pending.outcome

    def _commit_queued(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        if not batch:
            return
        outcomes = self._write(batch)
        if len(batch) > 1 and any(isinstance(o, BaseException) and
                                  not isinstance(o, (ResponseConflict, StorageError, SessionWithdrawn))
                                  for o in outcomes):  # a database that cannot be opened fails them all alike
            outcomes = [self._write([pending])[0] for pending in batch]
        for pending, outcome in zip(batch, outcomes):
            pending.outcome = outcome
            pending.done.set()

    def _write(self, batch: list[_Pending]) -> list[WriteResult | BaseException]:
        """One transaction for the batch; when it fails (rolled back), every answer in it gets
        that error, and ``_commit_queued`` retries them one by one, so a row the database
        refuses fails only its own request. A store that cannot be opened again (the database is
        down) is such a failure too: every waiting request gets the error, none waits for good."""
        try:
            if not self.store.database.usable:
                self.store = self.open_store()
            return self.store.write_each(
                [p.row for p in batch], normalised=True, urgent=True,
                also=lambda conn: self.renew(sorted({p.observer for p in batch}), conn),
                refused=lambda conn, observers: {o: SessionWithdrawn() for o in ServerDB.gone(conn, list(observers))})
        except BaseException as err:
            return [err] * len(batch)
