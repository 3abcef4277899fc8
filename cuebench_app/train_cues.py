"""``cuebench train-cues``: the cue-reliance training workflow, from photos to a report.

It wires three stages, which is why it lives in the app layer: ``stimuli.cue_training_sets`` makes the
study's stimuli once (the photos split per class, their structure-disrupted versions for DiSTinguish,
the DiST and cue-conflict experiments), with the feature network ``feature_nets`` loads; ``model_eval``
trains an n-class head and evaluates (``model_eval.training.cue_study``); ``analysis`` writes the report.
"""

from __future__ import annotations

import argparse
import sys

from stimuli.cue_training_sets import DISTINGUISH_A_STEPS, SYNTHESIS_SIZE, prepare_study, prepared_study
from stimuli.texture_synthesis import STEPS_PER_DIST_STEP
from model_eval.train_cli import add_training_arguments
from model_eval.training.cue_study import CueConfig
from model_eval.training.jobs import resolve_device

from cuebench.commands import add_command
from cuebench.paths import user_path

from .feature_nets import FEATURE_NET_AUTO, choose_feature_net, load_feature_net


class DistSteps(argparse.Action):
    """``--dist-steps N``, the earlier spelling in DiST's own count: stored as N x ``STEPS_PER_DIST_STEP``
    synthesis steps, with one line on stderr saying so."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = values * STEPS_PER_DIST_STEP
        print(f"cuebench train-cues: {option_string} is deprecated, use --synthesis-steps ({values} DiST steps = "
              f"--synthesis-steps {steps})", file=sys.stderr)
        setattr(namespace, self.dest, steps)


def register(sub) -> None:
    cues = add_command(
        sub, "train-cues",
        help="fine-tune ImageNet models with ERM/pAdaIN/DiSTinguish/SagNet/InfoDrop and compare cue reliance",
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
    cues.add_argument("--model", default=CueConfig.model, help="timm architecture with offline ImageNet weights")
    add_training_arguments(cues, runs_of="algorithm", epochs=CueConfig.epochs, batch_size=CueConfig.batch_size,
                           adam_lr=CueConfig.lr, device_use=" (training, synthesis, evaluation)")
    cues.add_argument("--input-size", type=int, default=CueConfig.input_size, help="training image side")
    cues.add_argument("--synthesis-steps", type=int, default=DISTINGUISH_A_STEPS,
                      help="texture-synthesis steps (L-BFGS iterations, as 'stimuli build --design dist "
                           "--synthesis-steps') for the disrupted images, from unit noise; 200 = DiSTinguish-A's "
                           "10 DiST steps, 2000 = -C's 100, reading one DiST step as 20 (inferred from the paper's "
                           "timing)")
    cues.add_argument("--dist-steps", dest="synthesis_steps", type=int, action=DistSteps, help=argparse.SUPPRESS)
    cues.add_argument("--feature-net", default=FEATURE_NET_AUTO,
                      help="network whose Gram matrices the disrupted images match (NAME or NAME:WEIGHTS; DiST: "
                           "vgg19); auto: VGG-19 when the torch hub cache holds it, else an EfficientNet-Lite size "
                           "other than --model's; recorded in cue_study.json")
    cues.add_argument("--synthesis-size", type=int, default=SYNTHESIS_SIZE,
                      help="side the disrupted images are synthesised and quality-checked at (DiST: 224), then "
                           "resized to --input-size")
    cues.add_argument("--no-quality-gate", dest="quality_gate", action="store_false",
                      help="keep disrupted images whose LV/HFE ratios fall outside the DiST release's "
                           "(recorded as unchecked)")
    cues.add_argument("--max-photos", type=int, default=None, help="use at most this many photos")
    cues.add_argument("--max-trials", type=int, default=100, help="DiST oddity trials")
    cues.add_argument("--cue-per-class", type=int, default=10, help="cue-conflict images per shape class")
    cues.add_argument("--algorithm-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                      help="a setting of one algorithm, repeatable (KEY=VALUE when one trained algorithm has KEY; "
                           "'none' for no value; defaults are the papers'); '--algorithm-option help' lists them")
    ood = cues.add_mutually_exclusive_group()
    ood.add_argument("--ood-every", type=int, default=None, metavar="N",
                     help="answer the out-of-distribution sets (the study's DiST and cue-conflict experiments and "
                          "every --ood-set) after every N-th epoch, into cue_training.csv for 'cuebench selection' "
                          "(BiasBed: 1)")
    ood.add_argument("--ood-schedule", default=None, metavar="EPOCHS",
                     help="the same at the listed epochs, e.g. 1,5,10,last")
    cues.add_argument("--ood-set", action="append", default=[], type=user_path, metavar="EXPERIMENT",
                      help="a built experiment (e.g. 'stimuli build --design labelled-set' of edges or silhouettes) "
                           "answered on the schedule too, named by its folder; repeatable")
    cues.set_defaults(func=run_train_cues)


def run_train_cues(args) -> int:
    from analysis.cue_study import write_cue_report
    from model_eval.training.algorithms import ALGORITHMS, OptimizerRequest, options_help, parse_algorithm_options
    from model_eval.training.cue_study import CueJob, ood_request, plan_cue_jobs, study_ood_plan
    from model_eval.training.executors import run_study
    from model_eval.training.jobs import Runtime

    from cuebench.executors import parse_executor

    config = CueConfig(model=args.model, epochs=args.epochs, batch_size=args.batch_size,
                       input_size=args.input_size, seed=args.seed)
    optimizer = OptimizerRequest(args.optimizer, args.lr, args.weight_decay)
    algorithms = ALGORITHMS.names() if args.algorithms == "all" else [
        a.strip() for a in args.algorithms.split(",") if a.strip()]
    for name in algorithms:
        ALGORITHMS.get(name)  # an unknown name fails before anything is made, with "did you mean"
    if "help" in args.algorithm_option:
        print(options_help(algorithms))
        return 0
    options = parse_algorithm_options(args.algorithm_option, algorithms)
    spec = parse_executor(args.executor, args.executor_option)
    ood = ood_request(args.out, args.ood_every, args.ood_schedule, args.ood_set, config.epochs)
    if prepared_study(args.out, config.input_size, config.seed) is None:
        prepare_study(args.out, args.photos, args.dist, args.cue_conflict, input_size=config.input_size,
                      seed=config.seed, feature_net=choose_feature_net(args.feature_net, config.model),
                      load_feature_net=load_feature_net, device=resolve_device(args.device),
                      synthesis_steps=args.synthesis_steps, max_photos=args.max_photos, max_trials=args.max_trials,
                      cue_per_class=args.cue_per_class, gate=args.quality_gate, synthesis_size=args.synthesis_size)
    jobs = plan_cue_jobs(args.out, algorithms, args.runs, config, Runtime(device=args.device, amp=args.amp), options,
                         optimizer, study_ood_plan(args.out, ood) if ood else None)
    run_study(jobs, spec, args.workers)
    print(CueJob.wrote(CueJob.assemble(args.out)))
    print(f"wrote {write_cue_report(args.out)}")
    return 0
