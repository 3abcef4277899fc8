"""``cuebench exclude EXPDIR NAME --reason TEXT [--undo]``: the admin page's Exclude button
from the command line, for web and lab observers alike.

It appends to the one exclusion log (``cuebench.exclusions``) that every export, ``analyze``,
``report`` and the server's group assignment read, so the effect is the same as on the admin
page; ``by`` records that it came from the command line and who ran it. NAME is resolved to every
session carrying it within one namespace and the sessions are listed and agreed to first
(``people``): a Prolific ID with a retry excludes both sessions. The observer must be known to the
experiment: a participant of the server (web, or a registered lab session) or an observer with
stored responses (lab sessions from before registration, models). Without NAME it prints the
exclusion log.
"""

from __future__ import annotations

import getpass

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

from . import people


def register(sub) -> None:
    parser = sub.add_parser(
        "exclude", help="exclude an observer from every statistic and export, or take it back (--undo)",
        description="Exclude a participant (web or lab) from the experiment's statistics and mark them in every "
                    "export, as the admin page's Exclude button does; --undo takes an exclusion back (the log "
                    "keeps both). NAME stands for every session carrying it (a Prolific ID's retries too), listed "
                    "before you agree. Without NAME: print the exclusion log.")
    parser.add_argument("expdir", type=user_path, metavar="EXPDIR", help="experiment directory")
    people.add_arguments(parser, "exclude")
    parser.add_argument("--reason", help="why (required to exclude and to undo; stored with the event)")
    parser.add_argument("--undo", action="store_true", help="take the exclusions in force back")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the responses (default: $CUEBENCH_DATABASE, else "
                             "the folder's responses.sqlite)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from cuebench.exclusions import ExclusionError, current, history, record
    from cuebench.responses import ResponseStore

    _, experiment, location = people.participants_store(args.expdir, args.database)
    namespace, name = people.given(args)
    with ResponseStore(location) as store:
        if name is None:
            for event in history(store.conn, experiment):
                print(f"{event.at}  {'exclude' if event.excluded else 'undo   '}  {event.observer}  {event.label}")
            print(f"{len(current(store.conn, experiment))} observer(s) excluded now")
            return 0
        if not (args.reason or "").strip():
            raise ExclusionError(f"{'un-excluding' if args.undo else 'excluding'} {name!r} needs a reason")
        person = people.find(store, experiment, location, namespace, name)
        codes = person.codes
        if args.undo:
            codes = [code for code in codes if code in current(store.conn, experiment)]
            if not codes:
                raise ExclusionError(f"no session of {name!r} is excluded from experiment {experiment!r}")
        people.agree(person, "take back the exclusion of" if args.undo else "exclude", args.yes)
        events = [record(store.conn, experiment, code, not args.undo, args.reason, by=f"cli ({_user()})")
                  for code in codes]
    for code, event in zip(codes, events):
        named = code if code == name else f"{code} ({name})"
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
