"""``cuebench withdraw EXPDIR ID``: a participant withdraws, and their data go, everywhere.

A person may withdraw after taking part (an ethics board's usual promise, and the GDPR's right to
erasure). The participant, named by code, Prolific ID or entry code (``cuebench exclude``'s
resolver), loses every row that is theirs in one transaction: responses of every session and
adaptive block, questionnaire answers, exclusion events, the server's participant record; then
the lab runner's PsychoPy-style CSV and log files of their sessions (``EXPDIR/data/``). Exports
made afterwards cannot contain them. What stays is the fact that someone withdrew, counted per
experiment with the date only (``cuebench.exclusions.record_withdrawal``), for the methods. A
SQLite file is vacuumed, so the erased rows do not linger in its free pages.
"""

from __future__ import annotations

from cuebench.errors import CuebenchError
from cuebench.paths import user_path


def register(sub) -> None:
    parser = sub.add_parser(
        "withdraw", help="erase a participant's data everywhere (they withdrew); only the count of withdrawals stays",
        description="Erase everything stored about one participant of the experiment (responses, questionnaire "
                    "answers, exclusions, the server's record, the lab runner's data files), because they withdrew. "
                    "The experiment keeps only how many people withdrew (not who). This cannot be undone.")
    parser.add_argument("expdir", type=user_path, metavar="EXPDIR", help="experiment directory")
    parser.add_argument("participant", metavar="ID", help="participant code, Prolific ID or entry code")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: the folder's responses.sqlite)")
    parser.set_defaults(func=run)


OBSERVER_TABLES = (("responses", "observer"), ("questionnaire_answers", "observer"), ("exclusions", "observer"),
                   ("participants", "code"))
"""(table, the column naming the person) of every table that holds something about one participant."""


def erase(store, experiment: str, observer: str) -> dict[str, int]:
    """Delete ``observer``'s rows of ``experiment`` from every table of :data:`OBSERVER_TABLES` and count the
    withdrawal, in one transaction; returns table -> rows deleted."""
    from cuebench.exclusions import record_withdrawal

    deleted = {}
    with store.conn.write_transaction() as conn:
        for table, column in OBSERVER_TABLES:
            if conn.columns(table):
                cursor = conn.execute(f'DELETE FROM "{table}" WHERE experiment=? AND "{column}"=?',
                                      [experiment, observer])
                deleted[table] = cursor.rowcount
        record_withdrawal(conn, experiment)
    if conn.dialect == "sqlite":
        conn.execute("VACUUM")
    return deleted


def run(args) -> int:
    from human_tasks.lab.session import DATA_DIR

    from cuebench.responses import ResponseStore
    from .exclude import participants_store, resolve_observer

    folder, experiment, location = participants_store(args.expdir, args.database)
    with ResponseStore(location) as store:
        observer = resolve_observer(store, experiment, location, args.participant)
        deleted = erase(store, experiment, observer)
    files = sorted((folder.root / DATA_DIR).glob(f"{observer}_{experiment}_session*"))
    for path in files:
        path.unlink()
    print(f"erased {observer}: {deleted.get('responses', 0)} responses, {len(files)} lab data file(s) and their "
          f"server record; the experiment keeps only that one more person withdrew")
    return 0
