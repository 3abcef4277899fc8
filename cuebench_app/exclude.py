"""``cuebench exclude EXPDIR OBSERVER --reason TEXT [--undo]``: the admin page's Exclude button
from the command line, for web and lab observers alike.

It appends to the one exclusion log (``cuebench.exclusions``) that every export, ``analyze``,
``report`` and the server's group assignment read, so the effect is the same as on the admin
page; ``by`` records that it came from the command line and who ran it. The observer must be
known to the experiment: a participant of the server (web, or a registered lab session) or an
observer with stored responses (lab sessions from before registration, models). Without
OBSERVER it prints the exclusion log.
"""

from __future__ import annotations

import difflib
import getpass

from cuebench.errors import CuebenchError
from cuebench.paths import user_path


def register(sub) -> None:
    parser = sub.add_parser(
        "exclude", help="exclude an observer from every statistic and export, or take it back (--undo)",
        description="Exclude a participant (web or lab) from the experiment's statistics and mark them in every "
                    "export, as the admin page's Exclude button does; --undo takes an exclusion back (the log "
                    "keeps both). Without OBSERVER: print the exclusion log.")
    parser.add_argument("expdir", type=user_path, metavar="EXPDIR", help="experiment directory")
    parser.add_argument("observer", nargs="?", metavar="OBSERVER",
                        help="participant code (the admin page's code, or the lab's --participant), Prolific ID "
                             "or entry code")
    parser.add_argument("--reason", help="why (required to exclude and to undo; stored with the event)")
    parser.add_argument("--undo", action="store_true", help="take the exclusion in force back")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: the folder's responses.sqlite)")
    parser.set_defaults(func=run)


def known_observers(store, experiment: str, database) -> dict[str, str]:
    """Who can be named: the server's participants (web and registered lab sessions) by their code, their
    Prolific ID and their entry code, and every observer with stored responses; name -> observer code."""
    from experiment_server.db import PARTICIPANTS, ServerDB

    known = {o: o for (o,) in store.conn.execute("SELECT DISTINCT observer FROM responses WHERE experiment=?",
                                                 [experiment]).fetchall()} if store.conn.columns("responses") else {}
    if store.conn.columns(PARTICIPANTS):
        db = ServerDB(database, experiment)
        try:
            for p in db.participants(experiment):
                known.update({name: p.code for name in (p.prolific_pid, p.entry_code) if name})
                known[p.code] = p.code
        finally:
            db.close()
    return known


def resolve_observer(store, experiment: str, database, given: str) -> str:
    """The observer code ``given`` names (a code, a Prolific ID or an entry code), or an error with the
    nearest names known."""
    known = known_observers(store, experiment, database)
    if given in known:
        return known[given]
    near = difflib.get_close_matches(given, sorted(known), n=3)
    hint = f"; did you mean {' or '.join(near)}?" if near else f" ({len(set(known.values()))} observers known)"
    raise CuebenchError(f"no observer, Prolific ID or entry code {given!r} in experiment {experiment!r}{hint}")


def participants_store(expdir, database: str | None):
    """(the experiment folder, its name, where its participants are stored): the folder's responses.sqlite, or
    ``--database``; a folder nobody has taken part in yet is refused in one line."""
    from cuebench.expdir import ExperimentDir

    folder = ExperimentDir(expdir)
    experiment = folder.load().name
    if database is None and not folder.responses_file.exists():
        raise CuebenchError(f"{folder.root} has no participants yet ({folder.responses_file.name} is missing)")
    return folder, experiment, database or folder.responses_file


def run(args) -> int:
    from cuebench.exclusions import current, history, record
    from cuebench.responses import ResponseStore

    _, experiment, location = participants_store(args.expdir, args.database)
    with ResponseStore(location) as store:
        if args.observer is None:
            for event in history(store.conn, experiment):
                print(f"{event.at}  {'exclude' if event.excluded else 'undo   '}  {event.observer}  {event.label}")
            print(f"{len(current(store.conn, experiment))} observer(s) excluded now")
            return 0
        observer = resolve_observer(store, experiment, location, args.observer)
        event = record(store.conn, experiment, observer, not args.undo, args.reason or "", by=f"cli ({_user()})")
    named = observer if observer == args.observer else f"{observer} ({args.observer})"
    if event.excluded:
        print(f"excluded {named} ({event.label}); every export marks them and no statistic counts them")
    else:
        print(f"{named} counts again ({event.label})")
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown user"
