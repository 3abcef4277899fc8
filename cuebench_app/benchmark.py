"""``cuebench benchmark MODEL [MODEL ...]``: every benchmark the bundled photos and the shared data sets allow,
built with the designs ``cuebench stimuli build`` uses, answered as ``cuebench eval`` answers, scored into one
scorecard per model (``analysis.scorecard``) beside the published values of the reference library.

Each benchmark's experiment is built once into ``CACHE/<benchmark>-<hash>/``, where the hash covers the design,
its options and every source image's bytes: a changed stimulus set is a new benchmark version in a new
folder, and an unchanged one is never rebuilt. Responses accumulate in that folder's response table, and a
model that has answered every trial is not even loaded again (a warm re-run does no model work). A model
is loaded once per run, at the first benchmark it has trials to answer, and answers the rest with it.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

BENCHMARK_FORMAT = 1
"""Bumped when the way a benchmark is built changes, so old caches become other versions."""


@dataclass(frozen=True)
class Benchmark:
    """A design on a source: ``shared`` is a path under the shared data folder (None: the bundled photos);
    ``layout`` how to take a subset (``classes``: first N files per class folder; ``dist``: first N originals
    with their two versions)."""

    design: str
    shared: str | None = None
    layout: str = "classes"
    options: dict = field(default_factory=dict)


BENCHMARKS = {
    "cue-conflict": Benchmark("cue-conflict-import", "data/geirhos2019/stimuli/cue-conflict"),
    "dist": Benchmark("dist-import", "data/dist", layout="dist"),
    "suppression": Benchmark("suppression", options={"grid": "human"}),
    "cue-decomposition": Benchmark("cue-decomposition"),
    # edge maps and silhouettes are classified as they are (the design's originals); grayscale is the one
    # suppression that leaves their pixels alone, so its trials cost no new stimuli
    "edges": Benchmark("suppression", "data/geirhos2019/stimuli/edges", options={"conditions": "grayscale"}),
    "silhouettes": Benchmark("suppression", "data/geirhos2019/stimuli/silhouettes",
                             options={"conditions": "grayscale"}),
}


def register(sub) -> None:
    parser = sub.add_parser("benchmark", help="score models on every bundled and shared benchmark: scorecards",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", metavar="MODEL", help="model specs NAME[:WEIGHTS], as `cuebench eval`")
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS),
                        help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--per-class", type=int, default=None, metavar="N",
                        help="first N images per class (DiST: first N triplets): small, fast benchmarks")
    parser.add_argument("--eed-steps", type=int, default=None, help="EED steps for cue-decomposition "
                                                                    "(default: the design's, Heinert et al.'s)")
    parser.add_argument("--shared", type=user_path, default=None,
                        help="the shared data folder (default: $CUEBENCH_SHARED or ../shared)")
    parser.add_argument("--cache", type=user_path, default="benchmark-cache", help="experiments and responses")
    parser.add_argument("--out", type=user_path, default="scorecards", help="where the scorecards go")
    parser.add_argument("--compare", action="store_true", help="also write compare.md: the models side by side")
    parser.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples per interval")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=64)
    from cuebench.executors import add_executor_arguments

    add_executor_arguments(parser, "models (one shard per model)")
    parser.set_defaults(func=run)


def run(args) -> int:
    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise CuebenchError(f"--benchmarks: unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    if args.per_class is not None and args.per_class < 1:
        raise CuebenchError(f"--per-class must be at least 1, got {args.per_class}")
    shared = args.shared or Path(os.environ.get("CUEBENCH_SHARED", "../shared")).absolute()
    explicit = args.benchmarks != parser_default()
    built = []
    for name in names:
        bench = BENCHMARKS[name]
        if bench.shared and not (shared / bench.shared).is_dir():
            if explicit:
                raise CuebenchError(f"benchmark {name} needs {shared / bench.shared}, which does not exist "
                                    "(--shared or CUEBENCH_SHARED names the shared data folder)")
            print(f"{name}: skipped, {shared / bench.shared} is missing")
            continue
        built.append((name, *prepare(name, bench, shared, args.cache, args.per_class, args.eed_steps)))
    # here, one model at a time goes through every benchmark: it is loaded once, and only it is in memory;
    # an executor gets all models of a benchmark at once (one shard each, each loading its own)
    here = args.executor == "local" and not args.executor_option
    observers = {}
    for group in ([[model] for model in args.models] if here else [args.models]):
        loaded = {}
        for name, expdir, _ in built:
            for model, observer in answer(expdir, group, args, loaded).items():
                observers[name, model] = observer
        del loaded
    cards = {model: [] for model in args.models}
    provenance = {model: [] for model in args.models}
    for name, expdir, digest in built:
        for model in args.models:
            entries, record = score_model(name, expdir, digest, observers[name, model], args.n_boot)
            cards[model] += entries
            provenance[model].append(record)
    args.out.mkdir(parents=True, exist_ok=True)
    written = [write_scorecard(args.out, model, cards[model], provenance[model]) for model in args.models]
    for path in written:
        print(f"scorecard: {path}")
    if args.compare:
        path = args.out / "compare.md"
        path.write_text(compare_markdown([json.loads(p.read_text()) for p in written]))
        print(f"comparison: {path}")
    return 0


def parser_default() -> str:
    return ",".join(BENCHMARKS)


def source_files(bench: Benchmark, root: Path, per_class: int | None) -> list[Path]:
    """The source files a benchmark uses, relative to ``root``, in a fixed order."""
    if bench.layout == "dist":
        originals = sorted(p.name for p in (root / "original").iterdir() if p.is_file())[:per_class]
        files = [Path(part) / n for n in originals for part in ("original", "set1", "set2")
                 if (root / part / n).is_file()]
        return files + ([Path("labels.csv")] if (root / "labels.csv").is_file() else [])
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    return [f.relative_to(root) for c in classes for f in sorted(p for p in c.iterdir() if p.is_file())[:per_class]]


def stimulus_hash(name: str, bench: Benchmark, options: dict, root: Path | None, files: list[Path]) -> str:
    """sha256 over the benchmark's design, options and each source file's name and bytes (the bundled photos:
    their pixels)."""
    digest = hashlib.sha256(json.dumps([BENCHMARK_FORMAT, name, bench.design, options], sort_keys=True).encode())
    if root is None:
        from stimuli.sources import default_images

        for image in default_images():
            digest.update(image.name.encode())
            digest.update(image.read().tobytes())
    for rel in files:
        digest.update(str(rel).encode())
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return digest.hexdigest()


def prepare(name: str, bench: Benchmark, shared: Path, cache: Path, per_class: int | None,
            eed_steps: int | None) -> tuple[Path, str]:
    """The benchmark's experiment folder, built unless a build of the same stimulus set exists."""
    import cuebench

    options = dict(bench.options)
    if bench.design == "cue-decomposition" and eed_steps is not None:
        options["eed_steps"] = eed_steps
    root = shared / bench.shared if bench.shared else None
    files = source_files(bench, root, per_class) if root else []
    digest = stimulus_hash(name, bench, options, root, files)
    expdir = cache / f"{name}-{digest[:12]}"
    if (expdir / "experiment.json").is_file():
        print(f"{name}: experiment {expdir.name} exists (same stimuli), not rebuilt")
        return expdir, digest
    images = "default"
    if root is not None:
        images = cache / "sources" / f"{name}-{digest[:12]}"
        for rel in files:
            link = images / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                os.symlink(root / rel, link)
    from stimuli.designs import split_options

    own, common = split_options(bench.design, {**options, "images": str(images)})
    partial = cache / f".{expdir.name}.building"
    shutil.rmtree(partial, ignore_errors=True)
    print(f"{name}: building {bench.design} from {images}")
    cuebench.build(bench.design, out=partial, options=own, **common.model_dump(exclude_unset=True))
    partial.rename(expdir)
    return expdir, digest


def answer(expdir: Path, models: list[str], args, loaded: dict | None = None) -> dict[str, dict]:
    """Each model answers the trials it has not answered; one that answered all of them is not loaded, and one
    in ``loaded`` (spec -> observer, filled as models load) is not loaded again. Returns spec ->
    ``{"observer", "weights"}`` of ``models``, kept in ``scorecard_observers.json`` beside the responses."""
    from cuebench.expdir import ExperimentDir
    from cuebench.responses import ResponseStore
    from model_eval.cli import evaluate

    known_file = expdir / "scorecard_observers.json"
    known = json.loads(known_file.read_text()) if known_file.is_file() else {}
    folder = ExperimentDir(expdir)
    experiment = folder.load()
    trial_ids = {t.trial_id for t in experiment.trials}
    store = ResponseStore(folder.responses_file)
    todo = [m for m in models if m not in known
            or not trial_ids <= store.answered_trial_ids(experiment.name, known[m]["observer"])]
    if todo:
        settings = {"rule": None, "batch_size": args.batch_size, "device": args.device, "policy": "as-is",
                    "mapping_file": None, "workers": None, "database": None}
        summary = evaluate(expdir, todo, settings, args.executor, args.executor_option, progress=False,
                           loaded=loaded)
        for spec, run in zip(todo, summary.runs):
            known[spec] = {"observer": run.observer, "weights": run.weights_source}
            print(f"{expdir.name}: {run.observer} answered {run.answered_now} trials, {run.skipped} stored before")
        known_file.write_text(json.dumps(known, indent=2))
    for spec in models:
        if spec not in todo:
            print(f"{expdir.name}: {known[spec]['observer']} has answered every trial (no model work)")
    return {spec: known[spec] for spec in models}


def score_model(name: str, expdir: Path, digest: str, observer: dict, n_boot: int) -> tuple[list[dict], dict]:
    """The scorecard entries of one benchmark for one model, and the row's provenance."""
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.scorecard import score

    scored = apply_exclusions(load_responses(expdir)).scored
    trials = scored[scored["observer"] == observer["observer"]]
    rules = sorted({str(r) for r in trials.get("decision_rule", trials.get("rule", [])) if r == r})
    entries = score(name, trials, n_boot=n_boot)
    record = {"benchmark": name, "benchmark_version": digest[:12], "stimulus_hash": digest,
              "design": BENCHMARKS[name].design, "experiment": expdir.name, "trials": int(len(trials)),
              "observer": observer["observer"], "weights": observer["weights"], "decision_rule": rules}
    for entry in entries:
        entry.update(benchmark_version=digest[:12], observer=observer["observer"])
    return entries, record


def write_scorecard(out: Path, model: str, entries: list[dict], provenance: list[dict]) -> Path:
    """``<model>.json`` plus ``.md`` and ``.html`` renderings of the same entries."""
    from cuebench.version import __version__

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    card = {"model": model, "package_version": __version__,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "benchmarks": provenance, "metrics": [_plain(e) for e in entries]}
    path = out / f"{safe}.json"
    path.write_text(json.dumps(card, indent=2))
    (out / f"{safe}.md").write_text(card_markdown(card))
    (out / f"{safe}.html").write_text(card_html(card))
    return path


def _plain(entry: dict) -> dict:
    """JSON has no NaN: an undefined number is null."""
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in entry.items()}


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _row(metric: dict) -> list[str]:
    interval = f"[{_fmt(metric['ci_low'])}, {_fmt(metric['ci_high'])}]"
    place = (f"{metric['rank']} of {metric['published_models'] + 1}" if metric["rank"] else "–")
    sources = "; ".join(r["label"] for r in metric["references"])
    return [metric["benchmark"], metric["metric"], f"{_fmt(metric['value'])} {interval}", _fmt(metric["human"]),
            place, sources, " ".join(metric["notes"])]


HEADER = ["benchmark", "metric", "score [95 % bootstrap]", "people (published)", "place among published models",
          "references", "notes"]


def card_markdown(card: dict) -> str:
    lines = [f"# Scorecard: {card['model']}", "",
             f"cuebench {card['package_version']}, {card['created']}", "",
             "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(_row(m)) + " |" for m in card["metrics"]]
    lines += ["", "## Provenance", "", "| benchmark | version | stimulus sha256 | trials | observer | weights | rule |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {b['benchmark']} | {b['benchmark_version']} | {b['stimulus_hash']} | {b['trials']} | "
              f"{b['observer']} | {b['weights']} | {', '.join(b['decision_rule'])} |" for b in card["benchmarks"]]
    return "\n".join(lines) + "\n"


def card_html(card: dict) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _row(m)) + "</tr>" for m in card["metrics"])
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    return (f"<!doctype html><meta charset='utf-8'><title>Scorecard: {html.escape(card['model'])}</title>"
            f"<h1>Scorecard: {html.escape(card['model'])}</h1><p>cuebench {card['package_version']}, "
            f"{card['created']}</p><table><thead><tr>{head}</tr></thead><tbody>{cells}</tbody></table>\n")


def compare_markdown(cards: list[dict]) -> str:
    """One row per metric, one column per model: score and interval."""
    keys = list(dict.fromkeys((m["benchmark"], m["metric"]) for c in cards for m in c["metrics"]))
    lines = ["| benchmark | metric | people | " + " | ".join(c["model"] for c in cards) + " |",
             "|" + " --- |" * (3 + len(cards))]
    for bench, name in keys:
        found = [next((m for m in c["metrics"] if (m["benchmark"], m["metric"]) == (bench, name)), None)
                 for c in cards]
        human = next((m["human"] for m in found if m), None)
        cells = [f"{_fmt(m['value'])} [{_fmt(m['ci_low'])}, {_fmt(m['ci_high'])}]" if m else "–" for m in found]
        lines.append(f"| {bench} | {name} | {_fmt(human)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
