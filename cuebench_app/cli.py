"""``cuebench``: one subcommand group per package, each registered by that package's ``cli`` module.

Every ``cli`` module exposes ``register(subparsers)`` and imports heavy libraries
(torch, PsychoPy, Flask) only inside its handlers, so ``cuebench --help`` and the
analysis/stimuli commands work without them.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from cuebench.version import __version__
from cuebench.errors import CuebenchError

COMMAND_MODULES = (
    "cuebench.contract_cli",
    "stimuli.cli",
    "model_eval.cli",
    "model_eval.train_cli",
    "experiment_server.cli",
    "human_tasks.cli",
    "analysis.cli",
    "cuebench_app.exclude",
    "cuebench_app.withdraw",
    "cuebench_app.train_cues",
    "cuebench_app.demo",
    "cuebench_app.benchmark",
    "cuebench_app.leaderboard",
    "cuebench_app.archive",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuebench",
        description="Cue-reliance experiments for people and ImageNet models, on the same trials.")
    parser.add_argument("--version", action="version", version=f"cuebench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    services = {"stimuli.cli": {"feature_net_loader": load_feature_net},
                "human_tasks.cli": {"lab_group_chooser": least_filled_group,
                                    "lab_session_recorder": record_lab_session},
                "cuebench_app.demo": {"run_command": main},
                "cuebench.contract_cli": {"more_schemas": {"rules": rules_model}},
                "analysis.cli": {"recruitment_target": recruitment_target}}
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, **services.get(name, {}))
    listing = sub.add_parser("list", help="list the installed plug-ins: every kind, or one (designs, observers, ...)")
    listing.add_argument("kind", nargs="?", help="which registry; without it, every registry with its plug-ins")
    listing.set_defaults(func=run_list)
    return parser


def rules_model() -> type:
    """``cuebench schema rules``: the model of a study's rules.json, which the server defines."""
    from experiment_server.study_rules import RulesRecord

    return RulesRecord


def recruitment_target(expdir) -> int | None:
    """``cuebench prereg``'s stopping rule: the recruitment target stored with the study (its rules.json), which
    the server enforces; None where the study has none."""
    from experiment_server.study_rules import load_rules

    return load_rules(expdir).target_n


def least_filled_group(expdir, database: str | None = None) -> int:
    """``cuebench lab run`` without ``--group`` joins the group the web server would give the
    next arrival (its fill counts, lab sessions included): ``human_tasks`` runs the session,
    ``experiment_server`` owns the assignment, and this is the one place that wires the two."""
    from experiment_server.assignment import least_filled
    from experiment_server.db import ServerDB

    from cuebench.expdir import ExperimentDir

    folder = ExperimentDir(expdir)
    experiment = folder.load()
    db = ServerDB(database or folder.responses_file, experiment.name)
    try:
        return least_filled(db.fill(experiment.name, len(experiment.assignment.groups)))
    finally:
        db.close()


def record_lab_session(expdir, database: str | None, participant: str, session: str, group: int, pilot: bool,
                       finished: bool) -> None:
    """``cuebench lab run`` registers its session among the web server's participants (admin page,
    exclusions, participants export), wired here like ``least_filled_group``. A new session (not a pilot)
    of a study that has reached the recruitment target of its stored rules (``study_rules``) is refused
    before it starts, as a latecomer on the web is."""
    from experiment_server.db import ServerDB
    from experiment_server.study_rules import FLAGS, load_rules, rules_file

    from cuebench.expdir import ExperimentDir

    folder = ExperimentDir(expdir)
    experiment = folder.load()
    db = ServerDB(database or folder.responses_file, experiment.name)
    try:
        rules = load_rules(folder.root)
        if not (finished or pilot) and rules.capped and db.get(participant) is None and rules.full(
                db.held_places(len(experiment.assignment.groups))):
            target = ", ".join(f"{FLAGS[name]} {getattr(rules, name)}" for name in ("target_n", "target_per_group")
                               if getattr(rules, name) is not None)
            raise CuebenchError(f"the study has reached its recruitment target ({target} in "
                                f"{rules_file(folder.root)}): no new session starts; raise it with `cuebench serve "
                                "EXPDIR --target-n N --update-rules`, or run a pilot with --simulate")
        db.record_lab_session(experiment.name, participant, session, group, pilot, finished)
    finally:
        db.close()


def load_feature_net(spec: str, device: str, layers: tuple[str, ...] | None = None):
    """The feature network texture synthesis optimises against: ``stimuli`` gets it from here,
    the one place that wires a stimulus design to ``model_eval``'s model loading."""
    from .feature_nets import load_feature_net as load

    return load(spec, device, layers)


def run_list(args) -> int:
    """``cuebench list [KIND]``: every registry the installed packages name (``cuebench.registries`` entry
    point) with its plug-ins, or the plug-ins of one, each with the first sentence of its docstring."""
    from cuebench.registry import UnknownName, registries

    every = registries()
    if args.kind and args.kind not in every:
        close = [k for k in sorted(every) if k.startswith(args.kind[:3])]
        raise UnknownName(f"unknown kind {args.kind!r}; known: {', '.join(sorted(every))}"
                          + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if args.kind:
        print_plugins(every[args.kind], indent="")
        return 0
    for number, kind in enumerate(sorted(every)):
        registry = every[kind]
        print(("\n" if number else "") + f"{kind} ({len(registry)}; entry point group {registry.entry_point_group})")
        print_plugins(registry, indent="  ")
    return 0


def print_plugins(registry, indent: str) -> None:
    """One line per plug-in of ``registry``: its name and its summary (``BROKEN ...`` for one that fails to load)."""
    names = registry.names()
    if not names:
        print(f"{indent}no {registry.kind} installed (a package adds them through the {registry.entry_point_group!r}"
              " entry point group)")
    width = max((len(n) for n in names), default=0)
    for name in names:
        print(f"{indent}{name:<{width}}  {registry.summary(name)}")


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``--option`` of the command line, subcommands included (for "did you mean")."""
    found = set()
    for action in parser._actions:
        found |= {o for o in action.option_strings if o.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                found |= option_strings(sub)
    return found


def unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments" with the nearest options for a misspelt one (``--practise``)."""
    known = sorted(option_strings(parser))
    options = [word for word in extras if word.startswith("--")]
    hints = [" or ".join(near) + (f" for {word}" if len(options) > 1 else "") for word in options
             for near in [difflib.get_close_matches(word.split("=", 1)[0], known, n=2, cutoff=0.75)] if near]
    return f"unrecognized arguments: {' '.join(extras)}" + (f" (did you mean {'; '.join(hints)}?)" if hints else "")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(unrecognized(extras, parser))
    try:
        return int(args.func(args) or 0)
    except CuebenchError as err:
        print(f"cuebench {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cuebench {args.command}: interrupted; everything committed so far is kept", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped early (`cuebench list | head`): quiet, as other Unix tools are
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's own flush fails no more
        return 141


if __name__ == "__main__":
    sys.exit(main())
