"""Images/s per model of a zoo evaluation -- several models in one ``cuebench eval`` -- against each
model's bare timm loop, in one run.

Stimuli: the 1,280 cue-conflict images of Geirhos et al. (2019) from
``$CUEBENCH_SHARED/data/geirhos2019/stimuli/cue-conflict`` imported as ``cuebench stimuli build
--design cue-conflict-import`` does (``--images N`` takes the first N/16 of each class), or N
generated stimuli with ``--generated``. The first zoo call decodes the stimuli once into the
experiment's cache (reported) and every model reads it; then, ``--repeats`` times on a fresh
response store, the zoo call again and each model's bare loop. Ours per model: its answering time
(cache read, batch preprocessing on the device, forward, decisions, committed rows; model loading
reported apart); bare: the model alone on already-preprocessed tensors (``bench_eval.bare_loop``).

    python benchmarks/bench_zoo.py --images 256                # 16 per class, CPU
    python benchmarks/bench_zoo.py --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench_eval import bare_loop, build_experiment

CUE_CONFLICT = Path("data/geirhos2019/stimuli/cue-conflict")
LITE = ["tf_efficientnet_lite0", "tf_efficientnet_lite1", "tf_efficientnet_lite2"]


def cue_conflict_experiment(expdir: Path, source: Path, limit: int | None) -> None:
    """Import the cue-conflict images (the first ``limit / 16`` of each class) as an experiment."""
    from cuebench_app.cli import main

    if limit is not None:
        subset = expdir.parent / "cue-conflict"
        classes = sorted(p for p in source.iterdir() if p.is_dir())
        for folder in classes:
            (subset / folder.name).mkdir(parents=True)
            for file in sorted(folder.glob("*.png"))[:max(1, limit // len(classes))]:
                shutil.copy(file, subset / folder.name / file.name)
        source = subset
    if main(["stimuli", "build", "--design", "cue-conflict-import", "--images", str(source),
             "--out", str(expdir)]) != 0:
        raise SystemExit("importing the cue-conflict images failed")


def zoo_call(expdir: Path, models: list[str], batch_size: int, device: str):
    from model_eval.evaluate import evaluate_experiment

    for leftover in expdir.glob("responses.sqlite*"):  # a fresh store: nothing to skip
        leftover.unlink()
    start = time.perf_counter()
    summary = evaluate_experiment(expdir, models, batch_size=batch_size, device=device, progress=False)
    return time.perf_counter() - start, summary.runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=None, help=f"repeatable (default: {', '.join(LITE)})")
    parser.add_argument("--images", type=int, default=None, help="fewer cue-conflict images (default: all 1,280)")
    parser.add_argument("--generated", type=int, default=None, metavar="N",
                        help="N generated stimuli instead of the cue-conflict set")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=1, help="warm zoo calls and bare loops; each keeps its best")
    args = parser.parse_args()
    models = args.model or LITE

    from model_eval.allocator import keep_freed_memory
    from model_eval.models import resolve_device
    from model_eval.torch_compat import import_timm

    import_timm()
    device = resolve_device(args.device)
    if device == "cpu":
        keep_freed_memory()  # what ``cuebench eval`` does on CPU; the bare loops run with it too
    with tempfile.TemporaryDirectory() as tmp:
        expdir = Path(tmp) / "zoo"
        if args.generated:
            build_experiment(expdir, args.generated)
            what = f"{args.generated} generated stimuli"
        else:
            shared = Path(os.environ.get("CUEBENCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
            if not (shared / CUE_CONFLICT).is_dir():
                raise SystemExit(f"{shared / CUE_CONFLICT} is missing: set CUEBENCH_SHARED or use --generated N")
            cue_conflict_experiment(expdir, shared / CUE_CONFLICT, args.images)
            what = "cue-conflict images (Geirhos et al. 2019)"
        from cuebench.expdir import ExperimentDir

        experiment = ExperimentDir(expdir).load()
        paths = [ExperimentDir(expdir).stimulus_path(s) for s in experiment.stimuli.values()]
        n = len(paths)
        cold_wall, cold = zoo_call(expdir, models, args.batch_size, device)
        best = {m: float("inf") for m in models}
        loading = {m: float("inf") for m in models}
        bare = {m: float("inf") for m in models}
        walls = []
        for _ in range(args.repeats):
            wall, runs = zoo_call(expdir, models, args.batch_size, device)
            walls.append(wall)
            for model, run in zip(models, runs):
                best[model] = min(best[model], run.seconds_answering)
                loading[model] = min(loading[model], run.seconds_loading)
            for model in models:
                run_bare = bare_loop(model, paths, args.batch_size, device)
                bare[model] = min(bare[model], run_bare()[0])
    print(f"device {device}, {n} {what}, batch size {args.batch_size}, {len(models)} models in one call, "
          f"best of {args.repeats}")
    print(f"first call: decoded {n} stimuli once in {cold[0].seconds_decoding:.2f} s "
          f"({n / cold[0].seconds_decoding:.0f} images/s); the other models read them from the cache "
          f"({', '.join(f'{r.seconds_decoding:.2f} s' for r in cold[1:])}); the whole cold call took {cold_wall:.1f} s")
    width = max(len(m) for m in models)
    print(f"{'model'.ljust(width)}  {'ours img/s':>10}  {'bare img/s':>10}  {'ratio':>6}  {'loading s':>9}")
    for model in models:
        print(f"{model.ljust(width)}  {n / best[model]:10.1f}  {n / bare[model]:10.1f}  "
              f"{bare[model] / best[model]:5.2f}x  {loading[model]:9.2f}")
    print(f"zoo total: {len(models) * n} model-images in {min(walls):.1f} s per warm call "
          f"(bare loops together: {sum(bare.values()):.1f} s)")


if __name__ == "__main__":
    main()
