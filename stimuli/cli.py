"""``cuebench stimuli build|metrics``."""

from __future__ import annotations

import argparse
from pathlib import Path

from cuebench.executors import add_executor_arguments, parse_executor, run_shards

from .shards import DEFAULT_SHARD_SIZE


def register(sub) -> None:
    from .designs import DESIGNS, all_modules

    stim = sub.add_parser("stimuli", help="build experiments and measure suppression quality")
    stim_sub = stim.add_subparsers(dest="stimuli_command", metavar="ACTION", required=True)

    build = stim_sub.add_parser(
        "build", help="build an experiment directory (experiment.json + stimuli/)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Build an experiment: content-addressed PNG stimuli with provenance and every trial, "
                    "deterministic by seed. Re-running into the same folder skips stimuli that exist.")
    build.add_argument("--design", required=True, choices=list(DESIGNS), help="what kind of experiment")
    build.add_argument("--images", default="default",
                       help="'default' (bundled public-domain photos), a folder with one sub-folder per class, "
                            "a flat folder with --labels, or the folder a design imports")
    build.add_argument("--labels", default=None, help="labels CSV (columns image,category) for a flat folder")
    build.add_argument("--out", required=True, type=Path, help="experiment directory to write")
    build.add_argument("--name", default=None, help="experiment name (default: the folder's name)")
    build.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    build.add_argument("--on-error", choices=("skip", "fail"), default="fail",
                       help="what to do with a corrupt or unreadable source image")
    build.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    build.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE,
                       help="source images per shard when an executor makes the EED shape cues")
    add_executor_arguments(build, "expensive stimuli (EED shape cues of cue-decomposition, cue-conflict-eed)")
    for module in all_modules():
        module.add_arguments(build)
    build.set_defaults(func=run_build)

    metrics = stim_sub.add_parser(
        "metrics", help="suppression-quality table (Burgert et al. 2025, Table 2 layout)",
        description="LV, HFE, ESSIM, GC and the Texture/Shape aggregates of each transformation, averaged over "
                    "the images (grayscale, window 11; ratios to the original capped at 1).")
    metrics.add_argument("--images", default="default", help="'default' or an image folder")
    metrics.add_argument("--labels", default=None, help="labels CSV for a flat folder")
    metrics.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    metrics.add_argument("--seed", type=int, default=0)
    metrics.set_defaults(func=run_metrics)


def run_build(args) -> int:
    from cuebench.expdir import ExperimentDir

    from .build import BuildError
    from .designs import design_module
    from .designs.common import build_provenance
    from .preflight import refuse_changes_to_collected

    expdir = ExperimentDir(args.out)
    module = design_module(args.design)
    refuse_changes_to_collected(expdir, args.name or expdir.root.name, args.design,
                                build_provenance(args, args.design)["options"])
    spec = parse_executor(args.executor, args.executor_option)
    if spec.name != "local":
        if not hasattr(module, "shards"):
            raise BuildError(f"--executor {spec.name}: design {args.design!r} builds in one process; the "
                             "executors make the EED shape cues of cue-decomposition and cue-conflict-eed")
        run_shards(module.shards(args, expdir), spec, desc="stimulus shards",
                   default_folder=expdir.shards_dir / "submitit")
    experiment = module.build(args, expdir)
    roles = {}
    for t in experiment.trials:
        roles[t.role] = roles.get(t.role, 0) + 1
    groups = len(experiment.assignment.groups) if experiment.assignment else 0
    print(f"{expdir.experiment_file}: {len(experiment.trials)} trials "
          f"({', '.join(f'{n} {r}' for r, n in sorted(roles.items()))}), {len(experiment.stimuli)} stimuli, "
          f"{groups} participant group(s)")
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
        from cuebench.expdir import atomic_write

        atomic_write(args.out, table.to_csv(index=False).encode("utf-8"))
        print(f"wrote {args.out}")
    return 0
