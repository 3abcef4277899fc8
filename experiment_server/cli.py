"""``cuebench serve EXPDIR`` and its actions: ``admin-password``, ``rotate-secret`` and ``codes``."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import secrets
import sys
from functools import partial
from pathlib import Path
from typing import Any

from cuebench.errors import CuebenchError
from cuebench.paths import user_path
from cuebench.storage import redacted
from cuebench.texts import ALLOW_FLAG, PILOT_FLAG

from .assignment import HOLD_SECONDS
from .db import OUTCOMES
from .study_rules import (BROWSERS, DEFAULT_MIN_WINDOW, DEFAULT_REFRESH_HZ, FLAGS, MIN_FREE_DISK_MB, RULES_FILE,
                          START_LIMIT, UNANSWERED_PER_ADDRESS, StudyRules, browser_list, check_time_limit, load_rules,
                          optional, refresh_range, settle_rules, window_size)

ADMIN_PASSWORD = "admin-password"
ROTATE_SECRET = "rotate-secret"
CODES = "codes"
RULES = "rules"
ACTIONS = (ADMIN_PASSWORD, ROTATE_SECRET, CODES, RULES)
CODE_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
"""Entry-code characters: no 0/o, 1/l/i to misread when a code is typed from paper."""
CODE_GROUPS = 4
CODE_GROUP_LENGTH = 4
"""16 characters of 31: 79 bits, beyond guessing even at the start rate limit."""
DATABASE_VARIABLE = "CUEBENCH_DATABASE"
"""Where the database URL may come from instead of ``--database`` (out of ``ps``)."""
PILOT_CODE_PREFIX = "pilot-"
"""What a test-mode code starts with, so that nobody hands one to a real participant by mistake."""


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default, except where there is none to show (None, or a flag's False)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the online experiment (waitress) or set its admin password",
        description="Serve an experiment directory to participants: `cuebench serve EXPDIR`. "
                    "Set the admin password (stored hashed; the admin area is closed until set): "
                    "`cuebench serve admin-password EXPDIR`. New keys (ends every login and open page): "
                    "`cuebench serve rotate-secret EXPDIR`. Print entry codes to hand out: "
                    "`cuebench serve codes EXPDIR -n 50` (test-mode codes that start pilot sessions: `--pilot`). "
                    "Store the study's rules without serving, and show them: "
                    "`cuebench serve rules EXPDIR --target-n 40`. "
                    "Options may stand before or after EXPDIR.",
        formatter_class=_DefaultsHelp)
    parser.add_argument("target", nargs="+", metavar="EXPDIR",
                        help=f"experiment directory, or one of {', '.join(ACTIONS)} and the directory")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 only behind HTTPS)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=8, help="request threads (per process)")
    parser.add_argument("--workers", type=int, default=1,
                        help="server processes; more than 1 runs gunicorn (Linux), 1 runs waitress")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB for responses and server tables, e.g. to serve one study "
                             f"from several hosts (default: ${DATABASE_VARIABLE}, else the folder's responses.sqlite); "
                             "its password belongs in ~/.pgpass or $PGPASSWORD, which `ps` does not show")
    parser.add_argument("--secrets", metavar="FILE",
                        help="the server's secrets (cookie key, admin password hash, completion codes), created "
                             "0600 (default: $CUEBENCH_SECRETS, else EXPDIR.secrets.json beside the folder)")
    parser.add_argument("--trusted-proxies", type=int, default=0, metavar="N",
                        help="reverse proxies in front that set X-Forwarded-For; the client address for rate "
                             "limits is then taken from it (0: the header is ignored)")
    parser.add_argument("--min-free-disk", type=int, default=MIN_FREE_DISK_MB, metavar="MB",
                        help="refuse new participants while the disk of responses.sqlite has less free space")
    rules = parser.add_argument_group(
        "study rules", f"stored in EXPDIR/{RULES_FILE} when first given and read by every later serve and lab run; "
                       "a value that differs from the stored one is refused unless --update-rules; "
                       "'none' switches a rule off")
    rules.add_argument("--update-rules", action="store_true",
                       help="apply rule options that differ from the stored rules (recorded with the time)")
    rule = partial(rules.add_argument, default=argparse.SUPPRESS)
    rule("--start-limit", type=int, metavar="N", help=f"session starts per client address per 10 minutes "
                                                      f"(default {START_LIMIT})")
    rule("--target-n", type=optional(int), metavar="N",
         help="close the study once N sessions count (finished, neither pilot nor excluded, live "
              "sessions included so it is not overshot); latecomers see texts/closed.md")
    rule("--target-per-group", type=optional(int), metavar="N",
         help="the same per Latin-square group: the study closes when every group has N")
    rule("--time-limit", type=optional(float), metavar="MINUTES",
         help="end a web session this many minutes after its start (status 'expired', the "
              "participant sees texts/time_up.md)")
    rule("--end-on-failed-attention", action=argparse.BooleanOptionalAction,
         help="a wrong answer to an attention trial ends the session at once (status "
              "'failed_attention', the participant sees texts/ended_early.md)")
    rule("--prolific-study-id", type=optional(str), metavar="ID",
         help="the Prolific study's ID: a Prolific link with another STUDY_ID is refused before consent")
    rule("--min-window", type=window_size, metavar="WxH",
         help="device rule: the smallest browser window (CSS px), checked before consent "
              f"(default {'x'.join(map(str, DEFAULT_MIN_WINDOW))})")
    rule("--refresh-hz", type=refresh_range, metavar="MIN-MAX",
         help="device rule: the display refresh rates allowed, measured before consent "
              f"(default {'-'.join(f'{v:g}' for v in DEFAULT_REFRESH_HZ)})")
    rule("--browsers", type=browser_list, metavar="LIST",
         help=f"device rule: the browsers allowed, comma-separated from {', '.join(BROWSERS)}, or 'any' (the default)")
    rule("--allow-touch", action=argparse.BooleanOptionalAction,
         help="device rule: let phones and tablets (touch screen, no mouse) take part")
    rule("--hold-minutes", type=float, metavar="MINUTES",
         help=f"how long a new session holds its place before its first stored answer (default {HOLD_SECONDS // 60})")
    rule("--unanswered-per-address", type=int, metavar="N",
         help=f"live sessions without a stored answer one client address may hold (default {UNANSWERED_PER_ADDRESS})")
    rule(PILOT_FLAG, action=argparse.BooleanOptionalAction,
         help="serve the pilot entry codes of `serve codes --pilot` only (everyone else is told the study is not open "
              "yet): the research team may read texts whose [[...]] placeholders are still to fill in, which serve "
              "otherwise refuses; stored like every rule, so a restart stays pilot-only until --no-pilot-only "
              "--update-rules")
    rule("--allow-repeat-completions", action=argparse.BooleanOptionalAction,
         help="let a Prolific ID get a completion code from more than one session (default: one)")
    parser.add_argument("-n", type=int, default=50, help="codes: how many entry codes to print")
    parser.add_argument("--pilot", action="store_true",
                        help="codes: test-mode codes, stored so that each starts a pilot session (observer_kind "
                             "'pilot': never counted as a person, holds no group slot)")
    parser.add_argument("--insecure-cookies", action="store_true",
                        help="cookies without the Secure mark, so the admin login and the start form work over plain "
                             "HTTP on a lab network (never on the internet); plain http:// to loopback "
                             "(127.0.0.1, localhost) needs no flag, and HTTPS always marks them")
    for outcome in OUTCOMES:
        parser.add_argument(f"--code-{outcome.replace('_', '-')}", metavar="CODE",
                            help=f"completion code for '{outcome}' (e.g. from Prolific); stored and reused; "
                                 f"better given as ${code_variable(outcome)}, which `ps` does not show")
    parser.add_argument(ALLOW_FLAG, action="store_true",
                        help="serve although texts/ contradict experiment.json (trial count, practice, time limit, "
                             "breaks, duration); without it, serve refuses and names the lines")
    parser.add_argument("--password-stdin", action="store_true",
                        help="admin-password: read the password from standard input instead of prompting")
    parser.set_defaults(func=run)
    _options_between_positionals(parser)


def _options_between_positionals(parser: argparse.ArgumentParser) -> None:
    """Let options stand anywhere among the action and EXPDIR: ``serve admin-password
    --password-stdin EXPDIR`` as well as ``serve admin-password EXPDIR --password-stdin``.
    argparse fills a positional from one run of words, so the words after an option are left
    over; here they join ``target`` (unknown options stay left over, and argparse refuses them)."""
    parse_known = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        namespace, extras = parse_known(args, namespace)
        words = [a for a in extras if not a.startswith("-")]
        if words and getattr(namespace, "target", None) is not None and len(words) == len(extras):
            namespace.target = [*namespace.target, *words]
            return namespace, []
        return namespace, extras

    parser.parse_known_args = parse_known_args


def run(args) -> int:
    args.database = database_url(args.database)
    if args.target[0] in ACTIONS:
        if len(args.target) != 2:
            raise CuebenchError(f"usage: cuebench serve {args.target[0]} EXPDIR")
        if args.target[0] == ADMIN_PASSWORD:
            return set_password(user_path(args.target[1]), args.password_stdin, args.database, args.secrets)
        if args.target[0] == ROTATE_SECRET:
            return rotate_secret(user_path(args.target[1]), args.database, args.secrets)
        if args.target[0] == RULES:
            return show_rules(user_path(args.target[1]), given_rules(args), args.update_rules)
        return print_codes(user_path(args.target[1]), args.n, args.pilot, args.database)
    if len(args.target) != 1:
        raise CuebenchError(f"serve takes one experiment directory, got {len(args.target)}: {' '.join(args.target)}")
    expdir = user_path(args.target[0])
    from cuebench.expdir import ExperimentDir

    from .app import check_port_free, serve
    from .study import open_study

    check_port_free(args.host, args.port)
    if ExperimentDir(expdir).exists():  # else serve says what is missing
        given = given_rules(args)
        check_study(expdir, load_rules(expdir).changed(given), args.allow_text_mismatch)
        settle_rules(expdir, given, args.update_rules)
    codes = completion_codes(args)
    if any(codes.values()):
        study = open_study(expdir, database=args.database, secrets_path=args.secrets)
        study.secrets.update({f"code_{outcome}": code for outcome, code in codes.items() if code})
        study.close()
    serve(expdir, host=args.host, port=args.port, threads=args.threads,
          insecure_cookies=args.insecure_cookies, workers=args.workers, database=args.database,
          secrets_path=args.secrets, trusted_proxies=args.trusted_proxies, min_free_disk_mb=args.min_free_disk)
    return 0


def given_rules(args) -> dict[str, Any]:
    """The study rules the command line gives (only those given: the others stay as stored), by their
    ``StudyRules.flat`` names; an option that sets two rules (``--min-window``) gives a pair."""
    given: dict[str, Any] = {}
    for flag in dict.fromkeys(FLAGS.values()):
        dest = flag.removeprefix("--").replace("-", "_")
        if dest in vars(args):
            names = [name for name, its in FLAGS.items() if its == flag]
            value = getattr(args, dest)
            given.update(zip(names, value) if len(names) > 1 else {names[0]: value})
    return given


def show_rules(expdir: Path, given: dict[str, Any], update: bool) -> int:
    """``serve rules EXPDIR [rule options]``: store the rules given (as ``serve`` would, without serving:
    a service then starts ``serve`` with no rule options) and print those in force with their history."""
    from cuebench.expdir import ExperimentDir

    from .study_rules import load_record, rules_file

    folder = ExperimentDir(expdir)
    if not folder.exists():
        raise CuebenchError(f"{folder.experiment_file}: no experiment.json; build an experiment first")
    rules = settle_rules(expdir, given, update)
    record = load_record(expdir)
    print(f"{rules_file(folder.root)}: {rules.describe()}" if record else f"the defaults (no {RULES_FILE} yet): "
          f"{rules.describe()}")
    for change in record.history if record else ():
        print(f"  {change.at}: " + "; ".join(f"{name} {json.dumps(old)} -> {json.dumps(new)}"
                                              for name, (old, new) in change.changed.items()))
    return 0


def database_url(given: str | None) -> str | None:
    """``--database``, else ``$CUEBENCH_DATABASE``. A password in the URL is visible to every user of
    the machine in ``ps`` for as long as the server runs: warned about, naming where it belongs
    (libpq reads ``~/.pgpass`` and ``$PGPASSWORD`` by itself)."""
    url = given or os.environ.get(DATABASE_VARIABLE) or None
    if given and redacted(given) != given:
        print(f"warning: the --database URL holds a password, which `ps` shows to every user of this machine; "
              f"put it in ~/.pgpass or $PGPASSWORD, or the whole URL in ${DATABASE_VARIABLE}", file=sys.stderr)
    return url


def code_variable(outcome: str) -> str:
    return f"CUEBENCH_CODE_{outcome.upper()}"


def completion_codes(args) -> dict[str, str | None]:
    """The completion codes given: ``--code-*``, else the environment (a command line is visible to
    every user of the machine in ``ps``; the environment is not)."""
    return {o: getattr(args, f"code_{o}") or os.environ.get(code_variable(o)) or None for o in OUTCOMES}


def check_study(expdir: Path, rules: StudyRules, allow_text_mismatch: bool = False) -> None:
    """Refuse to start while the study's texts contradict its experiment (``cuebench.texts.check_texts``,
    unless ``allow_text_mismatch``) or the time limit is shorter than the study (``check_time_limit``)."""
    from cuebench.expdir import ExperimentDir
    from cuebench.texts import check_texts

    folder = ExperimentDir(expdir)
    if folder.exists():  # else open_study says what is missing
        experiment = folder.load()
        check_time_limit(rules, experiment)
        if not allow_text_mismatch:
            check_texts(folder, experiment)


def rotate_secret(expdir: Path, database: str | None, secrets_path: str | None) -> int:
    """New keys (``study.Study.renew_keys``), taken by running servers at once."""
    from .study import open_study

    study = open_study(expdir, database=database, secrets_path=secrets_path)
    study.renew_keys()
    print(f"new keys in {study.secrets.path}: every admin session has ended, and open study pages stop working; "
          "participants go on by opening their study link again (their answers are kept)")
    return 0


def entry_codes(n: int) -> list[str]:
    """``n`` distinct random entry codes like ``k7mq-x9pd-4hzt-w3nc``."""
    codes: set[str] = set()
    while len(codes) < n:
        codes.add("-".join("".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_GROUP_LENGTH))
                           for _ in range(CODE_GROUPS)))
    return sorted(codes)


def print_codes(expdir: Path, n: int, pilot: bool = False, database: str | None = None) -> int:
    """Print entry codes to hand out (one a line); the server accepts any code, so these are
    what makes a code hard to guess. Pilot codes (``pilot-`` and a code) are stored in the
    experiment's database, where the server recognises them."""
    from cuebench.expdir import ExperimentDir

    from .db import ServerDB

    if n < 1:
        raise CuebenchError(f"-n must be at least 1, got {n}")
    folder = ExperimentDir(expdir)
    if not folder.exists():
        raise CuebenchError(f"{folder.experiment_file}: no experiment.json; build an experiment first")
    codes = entry_codes(n)
    if pilot:
        codes = [f"{PILOT_CODE_PREFIX}{code}" for code in codes]
        experiment = folder.load().name
        db = ServerDB(database or folder.responses_file, experiment)
        try:
            db.add_pilot_codes(experiment, codes)
        finally:
            db.close()
    print("\n".join(codes))
    return 0


def set_password(expdir: Path, from_stdin: bool, database: str | None = None, secrets_path: str | None = None) -> int:
    from .admin import set_admin_password
    from .study import open_study

    study = open_study(expdir, database=database, secrets_path=secrets_path)
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("New admin password: ")
        if getpass.getpass("Repeat it: ") != password:
            raise CuebenchError("the two passwords differ; nothing was changed")
    set_admin_password(study, password)
    print(f"admin password set for {study.expdir.root} (a salted scrypt hash in {study.secrets.path}); "
          "every admin session has ended")
    return 0
