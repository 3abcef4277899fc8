"""``cuebench withdraw EXPDIR NAME``: a participant withdraws, and their data go, everywhere.

A person may withdraw after taking part (an ethics board's usual promise, and the GDPR's right to
erasure). NAME stands for every session carrying it within one namespace (``people``: a Prolific
ID's retries are the same person, and a stranger's entry code that happens to equal it is not);
the sessions are listed and agreed to first. Every row that is theirs goes in one transaction:
responses of every session and adaptive block, questionnaire answers, exclusion events, the
server's participant records, which leave only salted hashes the server refuses later requests by
(``experiment_server.db.bury_sessions``). Then the database's files are rid of the deleted rows
(``Database.forget_deleted``: SQLite vacuumed and its write-ahead log truncated, PostgreSQL's
tables rewritten), and the files in the experiment folder that name the person go: the lab
runner's PsychoPy-style CSV and log files, exports written into the folder, and any report in it
that counted them (made again with ``cuebench report``). What stays is that someone withdrew,
counted per experiment with the date only (``cuebench.exclusions.record_withdrawal``), for the
methods.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from cuebench import db_schema
from cuebench.errors import CuebenchError
from cuebench.paths import user_path

from . import people


def register(sub) -> None:
    parser = sub.add_parser(
        "withdraw", help="erase a participant's data everywhere (they withdrew); only the count of withdrawals stays",
        description="Erase everything stored about one participant of the experiment (responses, questionnaire "
                    "answers, exclusions, the server's records, the lab runner's data files, exports and reports in "
                    "the folder that name them), every session of theirs, because they withdrew. The sessions are "
                    "listed first and you are asked. The experiment keeps only how many people withdrew (not who). "
                    "This cannot be undone.")
    parser.add_argument("expdir", type=user_path, metavar="EXPDIR", help="experiment directory")
    people.add_arguments(parser, "erase")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: $CUEBENCH_DATABASE, else "
                             "the folder's responses.sqlite)")
    parser.set_defaults(func=run)


OBSERVER_TABLES = ((db_schema.RESPONSES.name, "observer"), (db_schema.QUESTIONNAIRE_ANSWERS.name, "observer"),
                   (db_schema.EXCLUSIONS.name, "observer"), (db_schema.PARTICIPANTS.name, "code"))
"""(table, the column naming the person) of every table that holds something about one participant."""


def erase(store, experiment: str, codes: list[str]) -> dict[str, dict[str, int]]:
    """Delete the sessions ``codes`` of one person from every table of :data:`OBSERVER_TABLES`, leave the
    server their tombstones and count one withdrawal, in one transaction (``forget_deleted`` then rids the
    database's files of the deleted rows); code -> table -> rows deleted."""
    from cuebench.exclusions import record_withdrawal
    from experiment_server.db import bury_sessions

    deleted: dict[str, dict[str, int]] = {code: {} for code in codes}
    store.conn.secure_delete()
    with store.conn.write_transaction() as conn:
        bury_sessions(conn, experiment, codes)
        for table, column in OBSERVER_TABLES:
            for code in codes:
                deleted[code][table] = conn.execute(f'DELETE FROM "{table}" WHERE experiment=? AND "{column}"=?',
                                                    [experiment, code]).rowcount
        record_withdrawal(conn, experiment)
    return deleted


def files_naming(folder, person: people.Person, experiment: str) -> list[Path]:
    """The files and report folders in the experiment folder that hold something of ``person``: the lab
    runner's data files of their sessions, and every other file (a zip's members read too) whose bytes
    contain one of their codes, Prolific IDs or entry codes; a report's whole folder, since its numbers
    counted them. The experiment's own files (experiment.json, stimuli, provenance, texts, the database)
    are not theirs and are not read."""
    from cuebench.expdir import EXPERIMENT_FILE, PROVENANCE_DIR, RESPONSES_FILE, SHARDS_DIR, STIMULI_DIR
    from cuebench.texts import TEXTS_DIR
    from human_tasks.lab.session import DATA_DIR

    root = folder.root
    found = {p for code in person.codes for p in (root / DATA_DIR).glob(f"{code}_{experiment}_session*")}
    needles = [name.encode() for name in person.names]
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if relative.parts[0] in (STIMULI_DIR, PROVENANCE_DIR, SHARDS_DIR, TEXTS_DIR, EXPERIMENT_FILE) or \
                relative.parts[0].startswith(RESPONSES_FILE) or path.is_symlink() or not path.is_file():
            continue
        if _names_any(path, needles):
            found.add(_report_folder(path, root) or path)
    return sorted(found)


CHUNK = 1 << 20
"""Bytes read at a time: a large export is searched without holding it in memory."""


def _names_any(path: Path, needles: list[bytes]) -> bool:
    """Whether the file holds one of ``needles``: its bytes, a zip's member names and contents (an export of
    model-vs-human CSVs is one), a Parquet file's text values (compressed in the file)."""
    if path.suffix == ".parquet":
        import pyarrow.compute
        import pyarrow.parquet

        table = pyarrow.parquet.read_table(path)
        return any(pyarrow.compute.any(pyarrow.compute.match_substring(column.cast("string"), needle.decode())).as_py()
                   for column in table.columns if column.type in (pyarrow.string(), pyarrow.large_string())
                   for needle in needles)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return any(any(needle in member.filename.encode() for needle in needles) or
                       _stream_holds(archive.open(member), needles) for member in archive.infolist())
    with open(path, "rb") as stream:
        return _stream_holds(stream, needles)


def _stream_holds(stream, needles: list[bytes]) -> bool:
    """Whether the stream holds a needle, read a chunk at a time (each chunk after the tail of the last, so a
    needle across the border is found)."""
    overlap, tail = max(map(len, needles)) - 1, b""
    with stream:
        while chunk := stream.read(CHUNK):
            window = tail + chunk
            if any(needle in window for needle in needles):
                return True
            tail = window[-overlap:] if overlap else b""
    return False


def _report_folder(path: Path, root: Path) -> Path | None:
    """The report folder (one holding report.html) ``path`` belongs to, if any."""
    for parent in path.parents:
        if parent == root or root not in parent.parents:
            return None
        if (parent / "report.html").is_file():
            return parent
    return None


def run(args) -> int:
    from cuebench.responses import ResponseStore

    folder, experiment, location = people.participants_store(args.expdir, args.database)
    namespace, name = people.given(args)
    if name is None:
        raise CuebenchError("name the participant who withdrew: their participant code, Prolific ID or entry code")
    with ResponseStore(location) as store:
        person = people.find(store, experiment, location, namespace, name)
        people.agree(person, "erase", args.yes)
        stale = files_naming(folder, person, experiment)
        deleted = erase(store, experiment, person.codes)
        for code, tables in deleted.items():
            print(f"erased {code}: " + ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in tables.items()))
        for path in stale:
            print(f"removed {path}" + ("/ (a report that counted them; make it again with `cuebench report`)"
                                       if path.is_dir() else ""))
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        for note in store.conn.forget_deleted([table for table, _ in OBSERVER_TABLES]):
            print(f"note: {note}")
    print(f"{name}: {len(deleted)} session(s) erased; the experiment keeps only that one more person withdrew. "
          "Copies outside the folder (exports written elsewhere, backups) are yours to delete.")
    return 0
