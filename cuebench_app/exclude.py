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
                        help="participant code (the admin page's code, or the lab's --participant)")
    parser.add_argument("--reason", help="why (required to exclude and to undo; stored with the event)")
    parser.add_argument("--undo", action="store_true", help="take the exclusion in force back")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: the folder's responses.sqlite)")
    parser.set_defaults(func=run)


def known_observers(store, experiment: str, database) -> set[str]:
    """Who can be excluded: the server's participants (web and registered lab sessions) and every
    observer with stored responses."""
    from experiment_server.db import PARTICIPANTS, ServerDB

    known = {o for (o,) in store.conn.execute("SELECT DISTINCT observer FROM responses WHERE experiment=?",
                                              [experiment]).fetchall()}
    if store.conn.columns(PARTICIPANTS):
        db = ServerDB(database, experiment)
        try:
            known |= {p.code for p in db.participants(experiment)}
        finally:
            db.close()
    return known


def run(args) -> int:
    from cuebench.expdir import ExperimentDir
    from cuebench.exclusions import current, history, record
    from cuebench.responses import ResponseStore

    folder = ExperimentDir(args.expdir)
    experiment = folder.load().name
    if args.database is None and not folder.responses_file.exists():
        raise CuebenchError(f"{folder.root} has no participants yet ({folder.responses_file.name} is missing)")
    location = args.database or folder.responses_file
    with ResponseStore(location) as store:
        if args.observer is None:
            for event in history(store.conn, experiment):
                print(f"{event.at}  {'exclude' if event.excluded else 'undo   '}  {event.observer}  {event.label}")
            print(f"{len(current(store.conn, experiment))} observer(s) excluded now")
            return 0
        known = known_observers(store, experiment, location)
        if args.observer not in known:
            near = difflib.get_close_matches(args.observer, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(near)}?" if near else f" ({len(known)} observers known)"
            raise CuebenchError(f"no observer {args.observer!r} in experiment {experiment!r}{hint}")
        event = record(store.conn, experiment, args.observer, not args.undo, args.reason or "", by=f"cli ({_user()})")
    if event.excluded:
        print(f"excluded {args.observer} ({event.label}); every export marks them and no statistic counts them")
    else:
        print(f"{args.observer} counts again ({event.label})")
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown user"
