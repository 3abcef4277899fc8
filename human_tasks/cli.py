"""``cuebench lab``: run an experiment's trials with a participant in the lab (PsychoPy)."""

from __future__ import annotations

import argparse
from functools import partial

from cuebench.paths import user_path
from cuebench.texts import ALLOW_FLAG


def register(subparsers, *, lab_group_chooser=None, lab_session_recorder=None) -> None:
    """``lab_group_chooser(expdir, database)`` (the web server's least-filled group, handed in by the
    command; this package may not import the server) places a new lab session without ``--group``;
    ``lab_session_recorder(expdir, database, participant, session, group, pilot, finished)``
    registers it among the server's participants."""
    lab = subparsers.add_parser("lab", help="run experiments with participants in the lab (PsychoPy)",
                                description="Lab sessions with PsychoPy: frame-counted, committed trial by trial.")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="LAB_COMMAND", required=True)
    run = lab_sub.add_parser(
        "run", help="run or resume one participant's session",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run (or resume) one participant's session of the experiment in EXPDIR. Every answer is "
                    "committed to EXPDIR/responses.sqlite at once; running the same command again resumes at "
                    "the first unanswered trial. A PsychoPy-style CSV and a log go to EXPDIR/data/.",
        epilog="example:\n  cuebench lab run my-experiment --participant P01 --session 1 --fullscreen\n"
               "  xvfb-run -a cuebench lab run my-experiment --participant pilot --simulate --refresh-hz 60")
    run.add_argument("expdir", type=user_path, metavar="EXPDIR", help="experiment directory (holds experiment.json)")
    run.add_argument("--participant", required=True, help="participant code (letters, digits, _ . -)")
    run.add_argument("--session", default="1", help="session label (default: 1)")
    run.add_argument("--group", type=int, default=None,
                     help="assignment group (default: the stored one when resuming, else the least filled group "
                          "by the web server's counts, lab sessions included)")
    run.add_argument("--fullscreen", action="store_true", help="full-screen window (use this for real sessions)")
    run.add_argument("--screen", type=int, default=0, metavar="K", help="display number (default: 0)")
    run.add_argument("--input", choices=("mouse", "keyboard"), default="mouse", dest="input_mode",
                     help="answer classification trials by clicking labels or with keys (see docs/lab.md)")
    run.add_argument("--refresh-hz", type=float, default=None, metavar="HZ",
                     help="the display's refresh rate, used when it cannot be measured stably")
    run.add_argument("--window-size", type=int, nargs=2, default=(1280, 800), metavar=("W", "H"),
                     help="window size in pixels when not full screen (default: 1280 800)")
    run.add_argument("--database", metavar="URL",
                     help="postgresql://USER@HOST/DB to store the answers in (default: EXPDIR/responses.sqlite)")
    run.add_argument("--simulate", action="store_true",
                     help="a scripted participant answers through the same input events (piloting, tests)")
    run.add_argument(ALLOW_FLAG, action="store_true",
                     help="run although texts/ contradict experiment.json (trial count, practice, time limit, "
                          "breaks, duration); without it, the run refuses and names the lines")
    run.set_defaults(func=partial(_run, lab_group_chooser=lab_group_chooser, lab_session_recorder=lab_session_recorder))


def _run(args, lab_group_chooser=None, lab_session_recorder=None) -> int:
    from .lab.session import LabOptions, run_lab_session
    from .lab.simulate import Script

    summary = run_lab_session(LabOptions(
        expdir=args.expdir, participant=args.participant, session=str(args.session), group=args.group,
        fullscreen=args.fullscreen, screen=args.screen, input_mode=args.input_mode, refresh_hz=args.refresh_hz,
        simulation=Script() if args.simulate else None, window_size=tuple(args.window_size),
        database=args.database, allow_text_mismatch=args.allow_text_mismatch,
        choose_group=None if lab_group_chooser is None else (lambda: lab_group_chooser(args.expdir, args.database)),
        record_session=None if lab_session_recorder is None else (
            lambda group, finished: lab_session_recorder(args.expdir, args.database, args.participant,
                                                         str(args.session), group, args.simulate, finished))))
    return 0 if summary.complete or summary.quit_early else 1

