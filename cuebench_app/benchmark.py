"""``cuebench benchmark MODEL [MODEL ...]``: every benchmark plug-in (``analysis.benchmarks``, ``cuebench list
benchmarks``) the bundled photos and the shared data sets allow, built with the designs ``cuebench stimuli build``
uses, answered as ``cuebench eval`` answers with the decision rule the benchmark's references used, scored into
one scorecard per model (``analysis.scorecard``) beside the published values of the reference library. A
scorecard records the command (every option), the package version and commit, so ``cuebench leaderboard
verify`` can re-run it.

Each benchmark's experiment is built once into ``CACHE/<benchmark>-<hash>/``, where the hash covers the design,
its options, the decision rule and every source image's bytes: a changed stimulus set is a new benchmark version in a new
folder, and an unchanged one is never rebuilt. Responses accumulate in that folder's response table, and a
model that has answered every trial is not even loaded again (a warm re-run does no model work). A model
is loaded once per run and answers the trials of every benchmark in one stream of batches, so small
benchmarks fill whole batches together instead of each ending in a partial one.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import math
import os
import shlex
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from cuebench.errors import CuebenchError
from cuebench.paths import user_path

if TYPE_CHECKING:
    from analysis.benchmarks import Benchmark

BENCHMARK_FORMAT = 2
"""Bumped when the way a benchmark is built or answered changes, so old caches become other versions."""
BATCH_SIZE = 64
"""Images per forward pass, where a run does not say (``--batch-size``)."""


def register(sub) -> None:
    parser = sub.add_parser("benchmark", help="score models on every bundled and shared benchmark: scorecards",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", metavar="MODEL", help="model specs NAME[:WEIGHTS], as `cuebench eval`")
    parser.add_argument("--benchmarks", default=None,
                        help="comma-separated subset (default: every benchmark `cuebench list benchmarks` shows)")
    parser.add_argument("--per-class", type=int, default=None, metavar="N",
                        help="first N images per class (DiST: first N triplets): small, fast, never ranked")
    parser.add_argument("--eed-steps", type=int, default=None, help="EED steps for cue-decomposition "
                                                                    "(default: the design's, Heinert et al.'s)")
    parser.add_argument("--shared", type=user_path, default=None,
                        help="the shared data folder (default: $CUEBENCH_SHARED or ../shared)")
    parser.add_argument("--cache", type=user_path, default="benchmark-cache", help="experiments and responses")
    parser.add_argument("--out", type=user_path, default="scorecards", help="where the scorecards go")
    parser.add_argument("--compare", action="store_true", help="also write compare.md: the models side by side")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    from cuebench.executors import add_executor_arguments

    add_executor_arguments(parser, "models (one shard per model)")
    parser.set_defaults(func=run)


def run(args) -> int:
    cards = scorecards(args.models, args)
    args.out.mkdir(parents=True, exist_ok=True)
    written = [write_scorecard(args.out, card) for card in cards]
    for path in written:
        print(f"scorecard: {path}")
    if args.compare:
        path = args.out / "compare.md"
        path.write_text(compare_markdown(cards))
        print(f"comparison: {path}")
    return 0


def scorecards(models: list[str], args) -> list[dict]:
    """Build (or find) every benchmark ``args.benchmarks`` names, let each model answer what it has not
    answered, and score: one scorecard dict per model. ``args``: the options of ``cuebench benchmark``."""
    from analysis.benchmarks import BENCHMARKS

    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()] if args.benchmarks else BENCHMARKS.names()
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise CuebenchError(f"--benchmarks: unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS.names())}")
    if args.per_class is not None and args.per_class < 1:
        raise CuebenchError(f"--per-class must be at least 1, got {args.per_class}")
    shared = args.shared or Path(os.environ.get("CUEBENCH_SHARED", "../shared")).absolute()
    built = []
    for name in names:
        bench = BENCHMARKS[name]()
        if bench.shared and not (shared / bench.shared).is_dir():
            if args.benchmarks:
                raise CuebenchError(f"benchmark {name} needs {shared / bench.shared}, which does not exist "
                                    "(--shared or CUEBENCH_SHARED names the shared data folder)")
            print(f"{name}: skipped, {shared / bench.shared} is missing")
            continue
        built.append((bench, *prepare(bench, shared, args.cache, args.per_class, args.eed_steps)))
    # here, one model at a time goes through every benchmark: it is loaded once, only it is in memory, and it
    # answers all benchmarks in one stream of batches; an executor gets all models of a benchmark at once (one
    # shard each, each loading its own)
    here = args.executor == "local" and not args.executor_option
    observers = {}
    for group in ([[model] for model in models] if here else [models]):
        loaded = {}
        answered = answer([(expdir, bench.decision_rule) for bench, expdir, _ in built], group, args, loaded)
        for (bench, _, _), found in zip(built, answered):
            for model, observer in found.items():
                observers[bench.name, model] = observer
        del loaded
    command = {"benchmarks": [bench.name for bench, _, _ in built], "per_class": args.per_class,
               "eed_steps": args.eed_steps, "device": args.device}
    cards = []
    for model in models:
        entries, provenance = [], []
        for bench, expdir, digest in built:
            scored, record = score_model(bench, expdir, digest, observers[bench.name, model])
            entries += scored
            provenance.append(record)
        cards.append(scorecard(model, command, entries, provenance))
    return cards


def source_files(bench: Benchmark, root: Path, per_class: int | None) -> list[Path]:
    """The source files a benchmark uses, relative to ``root``, in a fixed order."""
    if bench.layout == "dist":
        originals = sorted(p.name for p in (root / "original").iterdir() if p.is_file())[:per_class]
        files = [Path(part) / n for n in originals for part in ("original", "set1", "set2")
                 if (root / part / n).is_file()]
        return files + ([Path("labels.csv")] if (root / "labels.csv").is_file() else [])
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    return [f.relative_to(root) for c in classes for f in sorted(p for p in c.iterdir() if p.is_file())[:per_class]]


def stimulus_hash(bench: Benchmark, options: dict, root: Path | None, files: list[Path]) -> str:
    """sha256 over the benchmark's design, options and decision rule and each source file's name and bytes (the
    bundled photos: their pixels)."""
    digest = hashlib.sha256(json.dumps([BENCHMARK_FORMAT, bench.name, bench.design, options, bench.decision_rule],
                                       sort_keys=True).encode())
    if root is None:
        from stimuli.sources import default_images

        for image in default_images():
            digest.update(image.name.encode())
            digest.update(image.read().tobytes())
    for rel in files:
        digest.update(str(rel).encode())
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return digest.hexdigest()


def prepare(bench: Benchmark, shared: Path, cache: Path, per_class: int | None,
            eed_steps: int | None) -> tuple[Path, str]:
    """The benchmark's experiment folder, built unless a build of the same stimulus set exists."""
    import cuebench

    name = bench.name
    options = dict(bench.options)
    if bench.design == "cue-decomposition" and eed_steps is not None:
        options["eed_steps"] = eed_steps
    root = shared / bench.shared if bench.shared else None
    files = source_files(bench, root, per_class) if root else []
    digest = stimulus_hash(bench, options, root, files)
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


def answer(experiments: list[tuple[Path, str | None]], models: list[str], args, loaded: dict | None = None
           ) -> list[dict[str, dict]]:
    """Each model answers the trials of ``experiments`` ((folder, decision rule) pairs; rule None: each trial
    type's default) it has not answered; one that answered all of them is not loaded, and one in ``loaded`` (spec
    -> observer, filled as models load) is not loaded again. Here a model answers every experiment in one
    stream of batches (``model_eval.evaluate.evaluate_experiments``: small benchmarks fill whole batches
    together); an executor gets one shard per model and experiment. Returns, per experiment, spec ->
    ``{"observer", "weights"}`` of ``models``, kept in ``scorecard_observers.json`` beside its responses."""
    from cuebench.expdir import ExperimentDir
    from cuebench.responses import ResponseStore
    from model_eval.cli import evaluate
    from model_eval.evaluate import evaluate_experiments

    knowns, todos = [], []
    for expdir, _ in experiments:
        known_file = expdir / "scorecard_observers.json"
        known = json.loads(known_file.read_text()) if known_file.is_file() else {}
        folder = ExperimentDir(expdir)
        experiment = folder.load()
        trial_ids = {t.trial_id for t in experiment.trials}
        with ResponseStore(folder.responses_file) as store:
            todos.append([m for m in models if m not in known
                          or not trial_ids <= store.answered_trial_ids(experiment.name, known[m]["observer"])])
        knowns.append(known)
    waiting = [k for k, todo in enumerate(todos) if todo]
    settings = {"batch_size": args.batch_size, "device": args.device, "policy": "as-is", "mapping_file": None,
                "workers": None, "database": None}
    if waiting and args.executor == "local" and not args.executor_option:
        specs = list(dict.fromkeys(m for k in waiting for m in todos[k]))  # each loaded once, for all experiments
        summaries = evaluate_experiments([experiments[k] for k in waiting], specs, progress=False, loaded=loaded,
                                         **settings)
        asked = {k: (specs, summary) for k, summary in zip(waiting, summaries)}
    else:
        asked = {k: (todos[k], evaluate(experiments[k][0], todos[k], {"rule": experiments[k][1], **settings},
                                        args.executor, args.executor_option, progress=False, loaded=loaded))
                 for k in waiting}
    for k, (expdir, _) in enumerate(experiments):
        known = knowns[k]
        if k in asked:
            specs, summary = asked[k]
            for spec, run in zip(specs, summary.runs):
                known[spec] = {"observer": run.observer, "weights": run.weights_source}
                if spec in todos[k]:
                    print(f"{expdir.name}: {run.observer} answered {run.answered_now} trials, {run.skipped} stored "
                          "before")
            (expdir / "scorecard_observers.json").write_text(json.dumps(known, indent=2))
        for spec in models:
            if spec not in todos[k]:
                print(f"{expdir.name}: {known[spec]['observer']} has answered every trial (no model work)")
    return [{spec: known[spec] for spec in models} for known in knowns]


def score_model(bench: Benchmark, expdir: Path, digest: str, observer: dict) -> tuple[list[dict], dict]:
    """The scorecard entries of one benchmark for one model, and the row's provenance."""
    from analysis.benchmarks import image_list_hash
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses
    from analysis.scorecard import score

    scored = apply_exclusions(load_responses(expdir)).scored
    trials = scored[scored["observer"] == observer["observer"]]
    rules = sorted({str(r) for r in trials["decision_rule"].dropna()})
    entries = score(bench, trials, everyone=scored)
    record = {"benchmark": bench.name, "benchmark_version": digest[:12], "stimulus_hash": digest,
              "image_list_hash": image_list_hash(trials["source_image"].dropna()),
              "images": int(trials["source_image"].nunique()), "design": bench.design, "experiment": expdir.name,
              "trials": int(len(trials)), "observer": observer["observer"], "weights": observer["weights"],
              "decision_rule": rules}
    for entry in entries:
        entry.update(benchmark_version=digest[:12], observer=observer["observer"])
    return entries, record


def package_commit() -> str | None:
    """The git commit this cuebench runs from: pip's record of a VCS install, else the HEAD of the checkout it is
    imported from (:func:`checkout_commit`); None when neither is known."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        recorded = json.loads(distribution("cuebench").read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, json.JSONDecodeError):
        recorded = {}
    return recorded.get("vcs_info", {}).get("commit_id") or checkout_commit(Path(__file__).parents[1])


def checkout_commit(root: Path) -> str | None:
    """HEAD of the git checkout whose top level is ``root`` (``+dirty`` with uncommitted changes to tracked files);
    None where ``root`` is not a checkout's top level: a cuebench installed into a virtual environment inside
    another project's repository is not that project's commit."""
    root = root.resolve()

    def git(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=30)
    try:
        top, head = git("rev-parse", "--show-toplevel"), git("rev-parse", "HEAD")
        if top.returncode or head.returncode or Path(top.stdout.strip()).resolve() != root:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def reproduce_command(model: str, command: dict) -> str:
    """The ``cuebench benchmark`` command line that makes the same scorecard: every option that changes a number."""
    parts = ["cuebench", "benchmark", shlex.quote(model), "--benchmarks", ",".join(command["benchmarks"])]
    if command["per_class"] is not None:
        parts += ["--per-class", str(command["per_class"])]
    if command["eed_steps"] is not None:
        parts += ["--eed-steps", str(command["eed_steps"])]
    if command["device"] != "auto":
        parts += ["--device", command["device"]]
    return " ".join(parts)


def scorecard(model: str, command: dict, entries: list[dict], provenance: list[dict]) -> dict:
    from cuebench.version import __version__

    return {"model": model, "package_version": __version__, "commit": package_commit(),
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "command": command,
            "reproduce": reproduce_command(model, command), "benchmarks": provenance,
            "metrics": [_plain(e) for e in entries]}


def file_stem(model: str) -> str:
    """A file name for ``model`` that no other model name shares: the name where it is a safe file name as it
    is, else its safe characters and 8 digits of its sha256 (``resnet50.a1`` and ``resnet50_a1``, ``a/b`` and
    ``a_b`` stay apart)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in model)
    return safe if safe == model else f"{safe}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def write_scorecard(out: Path, card: dict) -> Path:
    """``<model>.json`` plus ``.md`` and ``.html`` renderings of the same entries."""
    stem = file_stem(card["model"])
    path = out / f"{stem}.json"
    path.write_text(json.dumps(card, indent=2))
    (out / f"{stem}.md").write_text(card_markdown(card))
    (out / f"{stem}.html").write_text(card_html(card))
    return path


def _plain(entry: dict) -> dict:
    """JSON has no NaN or infinity: an undefined or unbounded number is null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in entry.items()}


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _row(metric: dict) -> list[str]:
    interval = f"[{_fmt(metric['ci_low'])}, {_fmt(metric['ci_high'])}]"
    place = f"{metric['rank']} of {metric['published_models'] + 1}" if metric["rank"] else "not ranked"
    sources = "; ".join(s["citation"] for s in metric.get("sources", []) if s["ranked"]) or "–"
    return [metric["benchmark"], metric["metric"], f"{_fmt(metric['value'])} {interval}", _fmt(metric["human"]),
            place, sources, " ".join(metric["notes"])]


HEADER = ["benchmark", "metric", "score [95 % interval]", "people (published)", "place among published models",
          "ranked against", "notes"]
PROVENANCE = ["benchmark", "version", "stimulus sha256", "images", "image list sha256", "trials", "observer",
              "weights", "rule"]


def _provenance_row(b: dict) -> list[str]:
    return [b["benchmark"], b["benchmark_version"], b["stimulus_hash"], str(b["images"]), b["image_list_hash"],
            str(b["trials"]), b["observer"], b["weights"], ", ".join(b["decision_rule"])]


def _made_by(card: dict) -> str:
    return (f"cuebench {card['package_version']} (commit {card['commit'] or 'unknown'}), {card['created']}; "
            f"intervals: {card['metrics'][0]['interval'] if card['metrics'] else '–'}")


def card_markdown(card: dict) -> str:
    lines = [f"# Scorecard: {card['model']}", "", _made_by(card), "", f"Reproduce: `{card['reproduce']}`", "",
             "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(_row(m)) + " |" for m in card["metrics"]]
    lines += _context(card)
    lines += ["", "## Provenance", "", "| " + " | ".join(PROVENANCE) + " |", "|" + " --- |" * len(PROVENANCE)]
    lines += ["| " + " | ".join(_provenance_row(b)) + " |" for b in card["benchmarks"]]
    return "\n".join(lines) + "\n"


def context_sentences(card: dict) -> list[str]:
    """The published sources shown beside a score for context only (never in its rank), one sentence each."""
    return [f"{m['benchmark']} {m['metric']}: {sentence}" for m in card["metrics"] for sentence in m.get("context", [])]


def _context(card: dict) -> list[str]:
    rows = [f"- {sentence}" for sentence in context_sentences(card)]
    return ["", "## Shown for context, not ranked", "", *rows] if rows else []


def card_html(card: dict) -> str:
    def table(header, rows):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    items = "".join(f"<li>{html.escape(sentence)}</li>" for sentence in context_sentences(card))
    context = f"<h2>Shown for context, not ranked</h2><ul class='context'>{items}</ul>" if items else ""
    return (f"<!doctype html><meta charset='utf-8'><title>Scorecard: {html.escape(card['model'])}</title>"
            f"<h1>Scorecard: {html.escape(card['model'])}</h1><p>{html.escape(_made_by(card))}</p>"
            f"<p>Reproduce: <code>{html.escape(card['reproduce'])}</code></p>"
            f"{table(HEADER, [_row(m) for m in card['metrics']])}{context}<h2>Provenance</h2>"
            f"{table(PROVENANCE, [_provenance_row(b) for b in card['benchmarks']])}\n")


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
