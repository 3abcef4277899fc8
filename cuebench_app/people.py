"""Who a name on the command line means, for ``cuebench exclude`` and ``cuebench withdraw``: every session
carrying it, within one namespace, listed and agreed to before anything is done.

A participant code names one session (or a lab or model observer); a Prolific ID names every session
started with it (a retry after a lost connection is a second session, one person); an entry code every
session started with it. Codes are the server's own, but Prolific IDs and entry codes are not: someone
may type another person's Prolific ID as their entry code. So a name is looked up in every namespace,
and one found in more than one is refused with what it means in each, for the user to say which
(``--prolific-id``, ``--entry-code``, ``--code``); acting on the first match would act on a stranger.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

NAMESPACES = {"code": "participant code", "prolific_id": "Prolific ID", "entry_code": "entry code"}
"""Where a name is looked up -> how messages call it (the option is ``--`` and the key with dashes)."""


@dataclass(frozen=True)
class Session:
    """One session a name stands for, with what the user needs to recognise it."""
    code: str
    runner: str
    status: str
    prolific_pid: str | None = None
    entry_code: str | None = None
    answers: int = 0

    def line(self) -> str:
        named = "".join(f", {label} {value}" for label, value in (("Prolific ID", self.prolific_pid),
                                                                  ("entry code", self.entry_code)) if value)
        return f"{self.code} ({self.runner}, {self.status}{named}, {self.answers} stored answer(s))"


@dataclass(frozen=True)
class Person:
    """A name within one namespace and every session carrying it."""
    namespace: str
    name: str
    sessions: tuple[Session, ...]

    @property
    def codes(self) -> list[str]:
        return [s.code for s in self.sessions]

    @property
    def names(self) -> set[str]:
        """Every identifier of the person's sessions: their codes, Prolific IDs and entry codes."""
        return {n for s in self.sessions for n in (s.code, s.prolific_pid, s.entry_code) if n}


def add_arguments(parser, verb: str) -> None:
    """NAME, the options that say which namespace it is in, and ``--yes``."""
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="participant code, Prolific ID or entry code (every session carrying it)")
    which = parser.add_mutually_exclusive_group()
    for key, label in NAMESPACES.items():
        which.add_argument(f"--{key.replace('_', '-')}", metavar=key.upper(),
                           help=f"the {label} (when NAME is more than one of these)")
    parser.add_argument("--yes", action="store_true", help=f"{verb} without asking (for scripts)")


def given(args) -> tuple[str | None, str | None]:
    """(namespace or None, name or None) from NAME or one of ``--code``/``--prolific-id``/``--entry-code``."""
    chosen = [(key, getattr(args, key)) for key in NAMESPACES if getattr(args, key) is not None]
    if chosen and args.name is not None:
        raise CuebenchError(f"give the name once: either NAME ({args.name!r}) or --{chosen[0][0].replace('_', '-')}")
    return chosen[0] if chosen else (None, args.name)


def sessions_by_namespace(store, experiment: str, database) -> dict[str, dict[str, list[Session]]]:
    """namespace -> name -> sessions: the server's participants (web and registered lab sessions) under
    their code, Prolific ID and entry code, and observers with stored responses only (lab runs from
    before registration, models) under their code."""
    from experiment_server.db import PARTICIPANTS, ServerDB

    answers = dict(store.conn.execute("SELECT observer, COUNT(*) FROM responses WHERE experiment=? GROUP BY observer",
                                      [experiment]).fetchall())
    found: dict[str, dict[str, list[Session]]] = {key: {} for key in NAMESPACES}
    if store.conn.execute(f"SELECT 1 FROM {PARTICIPANTS} LIMIT 1").fetchone() is not None:  # a server's sessions
        db = ServerDB(database, experiment)
        try:
            for p in db.participants(experiment):
                session = Session(p.code, p.runner, p.status, p.prolific_pid, p.entry_code, answers.get(p.code, 0))
                for key, name in (("code", p.code), ("prolific_id", p.prolific_pid), ("entry_code", p.entry_code)):
                    if name:
                        found[key].setdefault(name, []).append(session)
        finally:
            db.close()
    for observer, n in answers.items():
        found["code"].setdefault(observer, [Session(observer, "responses only", "no server record", answers=n)])
    return found


def find(store, experiment: str, database, namespace: str | None, name: str) -> Person:
    """The person ``name`` stands for (in ``namespace``, or in the only namespace that has it); a name found
    in none, or in several without a namespace chosen, is refused naming the candidates."""
    found = sessions_by_namespace(store, experiment, database)
    keys = [namespace] if namespace else [key for key in NAMESPACES if name in found[key]]
    if namespace is None and len(keys) > 1:
        meanings = "; ".join(f"the {NAMESPACES[k]} of {', '.join(s.code for s in found[k][name])} "
                             f"(--{k.replace('_', '-')} {name})" for k in keys)
        raise CuebenchError(f"{name!r} is more than one person's name in experiment {experiment!r}: {meanings}; "
                            "say which with one of those options; nothing was changed")
    if not keys or name not in found[keys[0]]:
        where = found[namespace] if namespace else {n for key in NAMESPACES for n in found[key]}
        near = difflib.get_close_matches(name, sorted(where), n=3)
        label = NAMESPACES[namespace] if namespace else "observer, Prolific ID or entry code"
        hint = f"; did you mean {' or '.join(near)}?" if near else \
            f" ({len({s.code for names in found.values() for ss in names.values() for s in ss})} sessions known)"
        raise CuebenchError(f"no {label} {name!r} in experiment {experiment!r}{hint}")
    return Person(keys[0], name, tuple(found[keys[0]][name]))


def agree(person: Person, doing: str, yes: bool) -> None:
    """List the person's sessions and ask before ``doing`` them (``--yes``: do not ask); without a
    terminal to ask in, refuse (a script says ``--yes``), and a no is a refusal too."""
    n = len(person.sessions)
    print(f"{person.name} is the {NAMESPACES[person.namespace]} of {n} session(s):")
    for session in person.sessions:
        print(f"  {session.line()}")
    if yes:
        return
    if not sys.stdin.isatty():
        raise CuebenchError(f"no terminal to ask whether to {doing} these {n} session(s); add --yes to do it "
                            "without asking; nothing was changed")
    if input(f"{doing.capitalize()} these {n} session(s)? [y/N] ").strip().lower() not in ("y", "yes"):
        raise CuebenchError("nothing was changed")


def participants_store(expdir, database: str | None):
    """(the experiment folder, its name, where its participants are stored): ``--database``, else
    ``$CUEBENCH_DATABASE`` (as ``cuebench serve`` reads it), else the folder's responses.sqlite; an
    empty ``--database`` and a folder nobody has taken part in yet are refused in one line."""
    from cuebench.expdir import ExperimentDir
    from experiment_server.cli import database_url

    if database is not None and not database.strip():
        raise CuebenchError("--database is empty; give a postgresql:// URL, or leave the option out for the "
                            "folder's responses.sqlite")
    folder = ExperimentDir(user_path(expdir))
    experiment = folder.load().name
    location = database_url(database)
    if location is None and not folder.responses_file.exists():
        raise CuebenchError(f"{folder.root} has no participants yet ({folder.responses_file.name} is missing)")
    return folder, experiment, location or folder.responses_file
