"""``cuebench stimuli build|metrics``."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from cuebench.executors import add_executor_arguments, parse_executor, run_shards
from cuebench.texts import study_facts

from .shards import DEFAULT_SHARD_SIZE


BUILD_DESCRIPTION = ("Build an experiment: content-addressed PNG stimuli with provenance and every trial, "
                     "deterministic by seed. Re-running into the same folder skips stimuli that exist; a failed or "
                     "interrupted build leaves the folder as it was.")
WHERE_IT_RUNS = ("out", "design", "shard_size", "executor", "executor_option", "func", "command", "stimuli_command")
"""Namespace entries that are not build options (the command's own and where the work runs)."""


class DesignHelp(argparse.Action):
    """``--help``: with ``--design NAME`` before it, that design's options only; without, every design."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from .designs import DESIGNS

        name = getattr(namespace, "design", None)
        designs = DESIGNS
        if name in designs:
            design_parser(parser.prog, name).print_help()
        else:
            parser.print_help()
            print("\ndesigns (--design NAME --help shows one design's options):")
            for design_name in designs.names():
                print(f"  {design_name:<20} {designs.summary(design_name)}")
        parser.exit()


def add_common_arguments(parser: argparse.ArgumentParser, skip: set[str] = frozenset()) -> None:
    """The options every design takes (less ``skip``, those a design declares itself), and where the work runs."""
    from .options import BuildOptions, add_option_arguments

    parser.add_argument("--out", required=True, type=Path, help="experiment directory to write")
    add_option_arguments(parser.add_argument_group("common build options"), BuildOptions, skip=skip)
    parser.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE,
                        help="source images per shard when an executor makes the EED shape cues")
    add_executor_arguments(parser, "expensive stimuli (EED shape cues of cue-decomposition, cue-conflict-eed)")


def design_parser(prog: str, name: str) -> argparse.ArgumentParser:
    """The command line of one design, for its ``--help``: its own options, then the common ones."""
    from .designs import DESIGNS
    from .options import add_option_arguments

    designs = DESIGNS
    parser = argparse.ArgumentParser(prog=f"{prog} --design {name}", description=designs.summary(name))
    own = designs[name].Options
    add_option_arguments(parser.add_argument_group(f"{name} options"), own)
    add_common_arguments(parser, skip=set(own.model_fields))
    return parser


def register(sub, *, feature_net_loader) -> None:
    """``feature_net_loader`` (``model_eval``'s, handed in by the command) loads texture synthesis' CNN."""
    from .designs import DESIGNS
    from .options import add_option_arguments, flag

    stim = sub.add_parser("stimuli", help="build experiments and measure suppression quality")
    stim_sub = stim.add_subparsers(dest="stimuli_command", metavar="ACTION", required=True)

    build = stim_sub.add_parser("build", help="build an experiment directory (experiment.json + stimuli/)",
                                description=BUILD_DESCRIPTION, add_help=False)
    build.add_argument("-h", "--help", action=DesignHelp, help="show the options (of --design NAME, given first)")
    build.add_argument("--design", required=True, metavar="NAME",
                       help="what kind of experiment (`cuebench list designs`)")
    add_common_arguments(build)
    for _, design_class in DESIGNS.working():  # every design's options parse; run_build refuses foreign ones
        taken = {n for n in design_class.Options.model_fields if flag(n) in build._option_string_actions}
        add_option_arguments(build, design_class.Options, skip=taken, hidden=True)
    build.set_defaults(func=partial(run_build, feature_net_loader=feature_net_loader))

    metrics = stim_sub.add_parser(
        "metrics", help="suppression-quality table (Burgert et al. 2025, Table 2 layout)",
        description="LV, HFE, ESSIM, GC and the Texture/Shape aggregates of each transformation, averaged over "
                    "the images (grayscale, window 11; ratios to the original capped at 1).")
    metrics.add_argument("--images", default="default", help="'default' or an image folder")
    metrics.add_argument("--labels", default=None, help="labels CSV for a flat folder")
    metrics.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    metrics.add_argument("--seed", type=int, default=0)
    metrics.set_defaults(func=run_metrics)


def run_build(args, feature_net_loader) -> int:
    from .build import BuildError
    from .designs import build_experiment, split_options

    options, common = split_options(args.design, {k: v for k, v in vars(args).items() if k not in WHERE_IT_RUNS})
    spec = parse_executor(args.executor, args.executor_option)

    def run_executor_shards(design, request) -> None:
        if spec.name == "local":
            return
        if not hasattr(design, "shards"):
            raise BuildError(f"--executor {spec.name}: design {args.design!r} builds in one process; the "
                             "executors make the EED shape cues of cue-decomposition and cue-conflict-eed")
        run_shards(design.shards(request, args.shard_size), spec, desc="stimulus shards",
                   default_folder=request.expdir.shards_dir / "submitit")

    experiment = build_experiment(args.design, args.out, options, common, feature_net_loader=feature_net_loader,
                                  before_build=run_executor_shards)
    roles = {}
    for t in experiment.trials:
        roles[t.role] = roles.get(t.role, 0) + 1
    groups = len(experiment.assignment.groups) if experiment.assignment else 0
    people = all(t.card.for_people for t in experiment.trials)
    length = (f", about {study_facts(experiment)['minutes']} minutes a participant (the least `cuebench serve "
              "--time-limit` allows)") if people else ""
    print(f"{Path(args.out) / 'experiment.json'}: {len(experiment.trials)} trials "
          f"({', '.join(f'{n} {r}' for r, n in sorted(roles.items()))}), {len(experiment.stimuli)} stimuli, "
          f"{groups} participant group(s){length}")
    skipped = experiment.provenance.get("skipped_images") or []
    if skipped:
        print(f"skipped {len(skipped)} source image(s) (--on-error skip):\n" + "\n".join(f"  {s}" for s in skipped))
    report_label_mapping(experiment.label_set)
    return 0


def report_label_mapping(label_set) -> None:
    """Show the ImageNet classes found for a folder's labels, so the researcher checks them before models answer."""
    from cuebench.labels import imagenet_classes

    if label_set.name != "custom":
        return
    names = imagenet_classes()
    for label in label_set.labels:
        indices = label_set.imagenet_indices.get(label)
        found = ", ".join(f"{i} {names[i].name}" for i in indices) if indices else \
            f"none: find them with `cuebench labels search {label}`, then add them to experiment.json or give --mapping to eval"
        print(f"  label {label!r} -> ImageNet {found}")


def load_images(spec: str, labels: str | None) -> list:
    from .sources import fit_to_stimulus, resolve_images

    return [fit_to_stimulus(src.read()) for src in resolve_images(spec, labels)]


def run_metrics(args) -> int:
    from .metrics_table import format_table, metrics_table

    table = metrics_table(load_images(args.images, args.labels), seed=args.seed)
    print(format_table(table))
    if args.out:
        from cuebench.csvsafe import frame_csv
        from cuebench.expdir import atomic_write

        atomic_write(args.out, frame_csv(table))
        print(f"wrote {args.out}")
    return 0
