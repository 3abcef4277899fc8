"""``cuebench train STUDYDIR``: train timm models from scratch on a DiagViB-6 study directory."""

from __future__ import annotations

import argparse
from functools import partial

from cuebench.executors import add_executor_arguments
from cuebench.paths import user_path

PLUGIN_MODULES = ("model_eval.training.algorithms",)
"""Where this command's registries are filled; ``cuebench list`` imports them (torch stays lazy here)."""


def register(sub, *, cue_report_writer=None) -> None:
    """``cue_report_writer`` (``analysis``'s, handed in by the command) writes the train-cues report."""
    train = sub.add_parser(
        "train", help="train models from scratch on a DiagViB-6 study (BiasBed-style runs, per-epoch log)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train a timm model from scratch to predict each entry's target factor, several seeded runs, "
                    "evaluating validation and test after every epoch into STUDYDIR/training.csv. "
                    "Finished jobs are skipped on a re-run.")
    train.add_argument("study_dir", type=user_path, help="study directory (made by 'cuebench stimuli build --design diagvib')")
    train.add_argument("--model", default="resnet18", help="timm architecture (randomly initialised)")
    train.add_argument("--algorithm", default="erm",
                       help="training algorithm (BiasBed: ERM, pAdaIN, SagNet, InfoDrop; 'cuebench list algorithms'); "
                            "distinguish needs disrupted images and runs in train-cues")
    train.add_argument("--padain-p", type=float, default=0.01, help="pAdaIN: probability of a swap per step")
    train.add_argument("--runs", type=int, default=3, help="seeded runs per entry")
    train.add_argument("--epochs", type=int, default=10)
    train.add_argument("--batch-size", type=int, default=128)
    train.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    train.add_argument("--weight-decay", type=float, default=0.0)
    train.add_argument("--input-size", type=int, default=128, help="side the 128x128 images are resized to")
    train.add_argument("--seed", type=int, default=0, help="base seed; run r uses seed*1000 + r")
    train.add_argument("--studies", default=None, help="only these studies of the directory (comma list)")
    train.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    train.add_argument("--amp", action="store_true", help="bfloat16 autocast on CUDA")
    train.add_argument("--workers", type=int, default=1, help="local executor: parallel jobs")
    add_executor_arguments(train, "training jobs")
    train.set_defaults(func=run_train)
    _register_cue_study(sub, cue_report_writer)


def _register_cue_study(sub, cue_report_writer) -> None:
    from .training.cue_study import DEFAULT_FEATURE_NET, SYNTHESIS_SIZE, CueConfig

    cues = sub.add_parser(
        "train-cues", help="fine-tune ImageNet models with ERM/pAdaIN/DiSTinguish/SagNet/InfoDrop and compare cue reliance",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Fine-tune an ImageNet model (offline weights) on labelled photos with several algorithms, "
                    "several runs each, select each run's best-validation epoch, let its checkpoint answer DiST "
                    "oddity and cue-conflict trials, and write a comparison report (OUT/reports/cue_report.html). "
                    "Finished jobs are skipped on a re-run.")
    cues.add_argument("out", type=user_path, help="study directory to write")
    cues.add_argument("--photos", required=True, type=user_path,
                      help="training photos with labels.csv (image,imagenet_index); images beside it or in original/")
    cues.add_argument("--dist", required=True, type=user_path,
                      help="DiST release (original/, set1/, set2/); originals among the training photos are left out")
    cues.add_argument("--cue-conflict", required=True, type=user_path, help="cue-conflict folder <shape>/<shape>N-<texture>M.png")
    cues.add_argument("--algorithms", default="all",
                      help="comma list of registered algorithms ('cuebench list algorithms'), or all of them")
    cues.add_argument("--runs", type=int, default=3, help="seeded runs per algorithm")
    cues.add_argument("--model", default=CueConfig.model, help="timm architecture with offline ImageNet weights")
    cues.add_argument("--epochs", type=int, default=CueConfig.epochs)
    cues.add_argument("--batch-size", type=int, default=CueConfig.batch_size)
    cues.add_argument("--lr", type=float, default=CueConfig.lr, help="Adam learning rate")
    cues.add_argument("--input-size", type=int, default=CueConfig.input_size, help="training image side")
    cues.add_argument("--synthesis-steps", type=int, default=10,
                      help="texture-synthesis steps for the disrupted images, counted as DiST counts them (one step = "
                           "20 L-BFGS iterations; 10: DiSTinguish-A, 100: -C)")
    cues.add_argument("--feature-net", default=DEFAULT_FEATURE_NET,
                      help="network whose Gram matrices the disrupted images match (NAME or NAME:WEIGHTS; DiST: "
                           "vgg19); recorded in cue_study.json, with a warning when it is the network being trained")
    cues.add_argument("--synthesis-size", type=int, default=SYNTHESIS_SIZE,
                      help="side the disrupted images are synthesised and quality-checked at (DiST: 224), then "
                           "resized to --input-size")
    cues.add_argument("--no-quality-gate", dest="quality_gate", action="store_false",
                      help="keep disrupted images whose LV/HFE ratios fall outside the DiST release's "
                           "(recorded as unchecked)")
    cues.add_argument("--max-photos", type=int, default=None, help="use at most this many photos")
    cues.add_argument("--max-trials", type=int, default=100, help="DiST oddity trials")
    cues.add_argument("--cue-per-class", type=int, default=10, help="cue-conflict images per shape class")
    cues.add_argument("--seed", type=int, default=0, help="base seed; run r uses seed*1000 + r")
    cues.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (training, synthesis, evaluation)")
    cues.add_argument("--amp", action="store_true", help="bfloat16 autocast on CUDA")
    cues.add_argument("--workers", type=int, default=1, help="local executor: parallel jobs")
    add_executor_arguments(cues, "training jobs")
    cues.set_defaults(func=partial(run_train_cues, cue_report_writer=cue_report_writer))


def run_train(args) -> int:
    from cuebench.executors import parse_executor

    from .training.executors import pending, run_jobs
    from .training.jobs import Runtime, TrainConfig, assemble_table, plan_jobs

    config = TrainConfig(model=args.model, algorithm=args.algorithm, epochs=args.epochs, batch_size=args.batch_size,
                         lr=args.lr, weight_decay=args.weight_decay, input_size=args.input_size,
                         padain_p=args.padain_p, seed=args.seed)
    runtime = Runtime(device=args.device, amp=args.amp)
    studies = [s.strip() for s in args.studies.split(",")] if args.studies else None
    spec = parse_executor(args.executor, args.executor_option)
    jobs = plan_jobs(args.study_dir, config, args.runs, runtime, studies)
    todo = len(pending(jobs))
    print(f"{len(jobs)} jobs, {len(jobs) - todo} already finished, {todo} to run on '{args.executor}'")
    run_jobs(jobs, spec, args.workers)
    print(f"wrote {assemble_table(args.study_dir)}")
    return 0


def run_train_cues(args, cue_report_writer) -> int:
    from cuebench.executors import parse_executor

    from .training.algorithms import ALGORITHMS
    from .training.cue_study import CueConfig, assemble_table, plan_cue_jobs, prepare_study
    from .training.executors import pending, run_jobs
    from .training.jobs import Runtime

    config = CueConfig(model=args.model, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                       input_size=args.input_size, seed=args.seed)
    algorithms = ALGORITHMS.names() if args.algorithms == "all" else [
        a.strip() for a in args.algorithms.split(",") if a.strip()]
    spec = parse_executor(args.executor, args.executor_option)
    prepare_study(args.out, args.photos, args.dist, args.cue_conflict, config, args.synthesis_steps,
                  args.max_photos, args.max_trials, args.cue_per_class, args.device, args.feature_net,
                  args.quality_gate, args.synthesis_size)
    jobs = plan_cue_jobs(args.out, algorithms, args.runs, config, Runtime(device=args.device, amp=args.amp))
    todo = len(pending(jobs))
    print(f"{len(jobs)} jobs, {len(jobs) - todo} already finished, {todo} to run on '{args.executor}'")
    run_jobs(jobs, spec, args.workers)
    print(f"wrote {assemble_table(args.out)}")
    print(f"wrote {cue_report_writer(args.out)}")
    return 0
