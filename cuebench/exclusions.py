"""Exclusions decided about a whole observer: one log in the experiment's database, read everywhere.

An admin excluding a participant, the browser check screening one out, a failed attention
check and an un-exclusion are each one appended event (observer, excluded or not, reason,
UTC time, by whom); the latest event per observer is the current state, and the earlier
ones stay as the history. Nothing is overwritten, and no copy of the state lives anywhere
else: ``ResponseStore`` marks the rows of currently excluded observers when it reads them
(so every export and the analysis see the same fact), and the server's group assignment
frees an excluded person's slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from .db_schema import EXCLUSIONS
from .db_schema import WITHDRAWALS as WITHDRAWALS_TABLE
from .errors import CuebenchError
from .storage import Database, utc_now

TABLE = EXCLUSIONS.name
COLUMNS = ("experiment", "observer", "excluded", "reason", "at", "by")


class ExclusionError(CuebenchError):
    """An exclusion without a reason, or an un-exclusion of someone not excluded."""


@dataclass(frozen=True)
class Exclusion:
    experiment: str
    observer: str
    excluded: bool
    reason: str
    at: str
    by: str

    @property
    def label(self) -> str:
        """The text the response rows' ``exclusion_reason`` carries: who decided, and why."""
        return f"{self.by}: {self.reason}"


def record(db: Database, experiment: str, observer: str, excluded: bool, reason: str, by: str) -> Exclusion:
    """Append an exclusion (``excluded=True``) or an un-exclusion; both need a reason."""
    reason = (reason or "").strip()
    if not reason:
        raise ExclusionError(f"{'excluding' if excluded else 'un-excluding'} {observer!r} needs a reason")
    if not excluded and observer not in current(db, experiment):
        raise ExclusionError(f"{observer!r} is not excluded from experiment {experiment!r}")
    event = Exclusion(experiment, observer, excluded, reason, utc_now(), by)
    db.execute(f'INSERT INTO "{TABLE}" (experiment, observer, excluded, reason, "at", "by") VALUES (?, ?, ?, ?, ?, ?)',
               [experiment, observer, int(excluded), reason, event.at, by])
    return event


def history(db: Database, experiment: str | None = None, observer: str | None = None) -> list[Exclusion]:
    """Every event in the order recorded (of one experiment, or of all; of one observer of it, or of all)."""
    filters = {column: value for column, value in (("experiment", experiment), ("observer", observer))
               if value is not None}
    where = f" WHERE {' AND '.join(f'{column}=?' for column in filters)}" if filters else ""
    rows = db.execute(f'SELECT experiment, observer, excluded, reason, "at", "by" FROM "{TABLE}"{where} '
                      f"ORDER BY {db.row_order}", list(filters.values())).fetchall()
    return [Exclusion(e, o, bool(x), r, a, b) for e, o, x, r, a, b in rows]


def current(db: Database, experiment: str, observer: str | None = None) -> dict[str, Exclusion]:
    """Observer -> the exclusion in force (the latest event per observer, when it excludes); ``observer``:
    that one's alone (a server request reads one participant's, not the whole study's)."""
    return {o: e for o, e in latest(db, experiment, observer).items() if e.excluded}


def latest(db: Database, experiment: str | None = None, observer: str | None = None) -> dict:
    """The latest event per observer; keyed by observer for one experiment, else by (experiment, observer)."""
    out: dict = {}
    for event in history(db, experiment, observer):
        out[event.observer if experiment is not None else (event.experiment, event.observer)] = event
    return out


ATTENTION_CHECK = "attention check"
"""``by`` of the exclusions the runners record when a person fails an attention check."""


def note_attention_answer(db: Database, row: dict) -> Exclusion | None:
    """Exclude a person at the moment they answer an attention check wrong (``row``: the response row just
    stored), so a session abandoned afterwards is excluded in every export as in ``analyze``; None when the
    row is no failed check of a person, or the person is excluded already."""
    if row.get("role") != "attention" or row.get("observer_kind") != "human" or row.get("correct") != 0:
        return None
    if current(db, row["experiment"], row["observer"]):
        return None
    return record(db, row["experiment"], row["observer"], True,
                  f"attention trial {row['trial_id']} answered {row.get('response') or 'nothing'!r}, "
                  f"instructed {row.get('correct_answer') or 'another answer'!r}", ATTENTION_CHECK)


FEW_OBSERVERS = 8
"""Up to this many observers in the rows, ``mark`` reads their own events (a server request reading one
session's answers), not the whole log, which grows with the study."""


def mark(rows: list[dict], db: Database) -> list[dict]:
    """Response rows with ``excluded``/``exclusion_reason`` set for currently excluded observers;
    rows excluded when collected (refresh rate, browser check) keep their own reason."""
    people = {(row["experiment"], row["observer"]) for row in rows}
    if len(people) <= FEW_OBSERVERS:
        events = {(experiment, observer): event for experiment, observer in people
                  for event in current(db, experiment, observer).values()}
    else:
        events = {key: e for key, e in latest(db).items() if e.excluded}
    if not events:
        return rows
    for row in rows:
        event = events.get((row["experiment"], row["observer"]))
        if event is not None and not row.get("excluded"):
            row["excluded"] = 1
            row["exclusion_reason"] = event.label
    return rows


WITHDRAWALS = WITHDRAWALS_TABLE.name
"""One row per withdrawal (experiment, UTC date only): that someone withdrew, never who or exactly when."""


def record_withdrawal(db: Database, experiment: str) -> None:
    """Count one withdrawal from ``experiment`` whose data ``cuebench withdraw`` erased (the methods report
    the count); call inside the transaction that erased the data."""
    db.execute(f'INSERT INTO "{WITHDRAWALS}" (experiment, "at") VALUES (?, ?)', [experiment, utc_now()[:10]])


def withdrawals(db: Database, experiment: str) -> int:
    """How many participants withdrew from ``experiment`` (their data are gone; the count stays)."""
    return db.execute(f'SELECT COUNT(*) FROM "{WITHDRAWALS}" WHERE experiment=?', [experiment]).fetchone()[0]
