"""``cuebench serve EXPDIR`` and ``cuebench serve admin-password EXPDIR``."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

from . import exports  # noqa: F401  (registers the participants and prolific export formats)
from .db import OUTCOMES

ADMIN_PASSWORD = "admin-password"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the online experiment (waitress) or set its admin password",
        description="Serve an experiment directory to participants: `cuebench serve EXPDIR`. "
                    "Set the admin password (stored hashed; the admin area is closed until set): "
                    "`cuebench serve admin-password EXPDIR`.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("target", nargs="+", metavar="EXPDIR", help="experiment directory, or admin-password EXPDIR")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (0.0.0.0 only behind HTTPS)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=8, help="request threads (per process)")
    parser.add_argument("--workers", type=int, default=1,
                        help="server processes; more than 1 runs gunicorn (Linux), 1 runs waitress")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB for responses and server tables, e.g. to serve one study "
                             "from several hosts (default: the folder's responses.sqlite)")
    parser.add_argument("--insecure-cookies", action="store_true",
                        help="allow the admin login over plain HTTP on a lab network (not for the internet)")
    for outcome in OUTCOMES:
        parser.add_argument(f"--code-{outcome.replace('_', '-')}", metavar="CODE",
                            help=f"completion code for '{outcome}' (e.g. from Prolific); stored and reused")
    parser.add_argument("--password-stdin", action="store_true",
                        help="admin-password: read the password from standard input instead of prompting")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.target[0] == ADMIN_PASSWORD:
        if len(args.target) != 2:
            raise CuebenchError("usage: cuebench serve admin-password EXPDIR")
        return set_password(user_path(args.target[1]), args.password_stdin, args.database)
    if len(args.target) != 1:
        raise CuebenchError(f"serve takes one experiment directory, got {len(args.target)}: {' '.join(args.target)}")
    expdir = user_path(args.target[0])
    from .app import check_port_free, serve
    from .study import open_study

    codes = {o: getattr(args, f"code_{o}") for o in OUTCOMES}
    if any(codes.values()):
        check_port_free(args.host, args.port)
        study = open_study(expdir, database=args.database)
        for outcome, code in codes.items():
            if code:
                study.db.set_setting(f"code_{outcome}", code)
        study.close()
    serve(expdir, host=args.host, port=args.port, threads=args.threads,
          secure_cookies=not args.insecure_cookies, workers=args.workers, database=args.database)
    return 0


def set_password(expdir: Path, from_stdin: bool, database: str | None = None) -> int:
    from .admin import set_admin_password
    from .study import open_study

    study = open_study(expdir, database=database)
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("New admin password: ")
        if getpass.getpass("Repeat it: ") != password:
            raise CuebenchError("the two passwords differ; nothing was changed")
    set_admin_password(study, password)
    print(f"admin password set for {study.expdir.root} (stored as a salted scrypt hash)")
    return 0
