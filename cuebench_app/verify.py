"""``cuebench leaderboard verify SCORECARD``: re-run a scorecard's command for its model (the benchmarks and every
option it recorded) in a fresh cache and say, metric by metric, whether the re-run agrees with what was published
(Brain-Score's submission check, done locally).

A metric passes when the re-run gives the published numbers from the same answers (the scorecard records each
proportion's counts), or, where another machine answered some images differently, when the re-run's value lies
inside the published interval and the published value inside the re-run's: an edited value or interval fails,
as does an edited rank (overall or among one source's models), note, comparison with people or split of the
published sources into ranked and context only, a left-out metric or a reproduce line that is not the
recorded command, or a benchmark's provenance (stimuli, image list, rule, weights) the re-run does not give again.
A benchmark whose stimuli hash differently (other source images, another cuebench build) fails
as a whole: the re-run did not measure the same thing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

from cuebench.errors import CuebenchError


def run_verify(paths: list[Path], args) -> int:
    if not paths:
        raise CuebenchError("leaderboard verify needs a SCORECARD (the JSON file `cuebench benchmark` wrote)")
    failed = 0
    for path in paths:
        card = read_card(path)
        if args.cache is not None:
            failed += not verify(card, args, args.cache)
            continue
        with tempfile.TemporaryDirectory(prefix="cuebench-verify-") as cache:
            failed += not verify(card, args, Path(cache))
    return 1 if failed else 0


def read_card(path: Path) -> dict:
    try:
        card = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CuebenchError(f"{path}: not a readable scorecard ({err})") from err
    if not isinstance(card, dict) or not {"model", "metrics", "benchmarks"} <= set(card):
        raise CuebenchError(f"{path}: not a scorecard (JSON with model, metrics, benchmarks)")
    if "command" not in card:
        raise CuebenchError(f"{path}: the scorecard does not record the command that made it (written by an older "
                            "cuebench); make it again with `cuebench benchmark`")
    return card


def verify(card: dict, args, cache: Path) -> bool:
    """Re-run ``card``'s command into ``cache``, print one line per metric; True when every metric passes."""
    from .benchmark import BATCH_SIZE, scorecards

    command = card["command"]
    options = SimpleNamespace(benchmarks=",".join(command["benchmarks"]), per_class=command["per_class"],
                              eed_steps=command["eed_steps"], shared=args.shared, cache=cache,
                              device=args.device or command["device"], batch_size=args.batch_size or BATCH_SIZE,
                              executor="local", executor_option=[])
    print(f"verify {card['model']}: re-running `{card.get('reproduce', '')}` in {cache}")
    rerun = scorecards([card["model"]], options)[0]
    passed = True
    for line, ok in compare(card, rerun):
        passed &= ok
        print(f"  {line}")
    print(f"verify {card['model']}: {'passed' if passed else 'FAILED'}")
    return passed


def compare(card: dict, rerun: dict) -> list[tuple[str, bool]]:
    """(line, ok) per check of a published scorecard against its re-run: the reproduce line is the recorded
    command's, each benchmark's provenance is the re-run's, every metric the re-run scores is published (none left
    out), and each published metric agrees (:func:`judge`)."""
    from .benchmark import reproduce_command

    out = []
    if card.get("reproduce") != (expected := reproduce_command(card["model"], card["command"])):
        out.append((f"reproduce: published `{card.get('reproduce')}`, the recorded command is `{expected}`: FAIL",
                    False))
    records = {b["benchmark"]: b for b in rerun["benchmarks"]}
    for record in card["benchmarks"]:   # what the provenance page shows: the same stimuli, rule and weights
        theirs = records.get(record["benchmark"], {})
        if changed := [k for k in PROVENANCE if k in record and record[k] != theirs.get(k)]:
            out.append((f"{record['benchmark']} provenance: the published {', '.join(changed)} differ from the "
                        "re-run's: FAIL", False))
    stimuli = {b["benchmark"]: b["stimulus_hash"] for b in rerun["benchmarks"]}
    published_stimuli = {b["benchmark"]: b["stimulus_hash"] for b in card["benchmarks"]}
    again = {(m["benchmark"], m["metric"]): m for m in rerun["metrics"]}
    for metric in card["metrics"]:
        key = (metric["benchmark"], metric["metric"])
        published = published_stimuli.get(key[0])
        if stimuli.get(key[0]) != published:
            verdict, ok = (f"FAIL: the re-run's stimuli differ (version {str(stimuli.get(key[0]))[:12]}, published "
                           f"{str(published)[:12]})"), False
        elif key not in again:
            verdict, ok = "FAIL: the re-run has no such metric", False
        else:
            verdict, ok = judge(metric, again[key])
        out.append((f"{key[0]} {key[1]}: published {_show(metric)}, re-run {_show(again.get(key))}: {verdict}", ok))
    published_keys = {(m["benchmark"], m["metric"]) for m in card["metrics"]}
    out += [(f"{b} {m}: published –, re-run {_show(again[b, m])}: FAIL: the scorecard leaves out a metric its "
             "command scores", False) for b, m in again if (b, m) not in published_keys]
    return out


PROVENANCE = ("benchmark_version", "stimulus_hash", "image_list_hash", "images", "design", "trials", "weights",
              "decision_rule")
"""A benchmark's provenance that the same command on the same data must give again (the observer's name may
differ: another machine, another loader)."""
CLAIMS = ("comparable", "human", "human_range", "context")
"""Whether a number is set beside the people, and which, and which sources are context only: the same for any
answers on the same stimuli."""
SAME_ANSWERS = ("value", "ci_low", "ci_high", "rank", "rank_range", "not_ranked_because", "notes", "sources")
"""What the same answers (equal per-cell counts) must give again exactly."""


def judge(published: dict, rerun: dict) -> tuple[str, bool]:
    """(verdict, ok) of one metric. The same answers (equal per-cell counts) must give the same numbers, rank and
    notes; other answers (another device may flip an image) pass when each value lies inside the other's interval.
    Either way the claims around the number (compared with people or not, and why) must be the re-run's."""
    if published["value"] is None or rerun["value"] is None:
        if published["value"] is None and rerun["value"] is None:
            return "pass (no score, as published)", True
        if rerun["value"] is None and (published.get("not_ranked_because") or "").startswith("S_cd is normalised over"):
            return "not checked: S_cd was normalised over models this re-run of one model does not include", True
        return "FAIL: one of the two has no score", False
    changed = [k for k in CLAIMS if not _equal(published.get(k), rerun.get(k))]
    if not _equal(_split(published), _split(rerun)):
        changed.append("sources ranked and shown for context")
    if changed:
        return f"FAIL: the published {', '.join(changed)} differ from the re-run's (edited?)", False
    if published.get("counts") == rerun["counts"]:
        changed = [k if k != "sources" else "place among each source's models" for k in SAME_ANSWERS
                   if not _equal(published.get(k), rerun.get(k))]
        return (("pass (the same answers give the same numbers)", True) if not changed else
                (f"FAIL: the same answers do not give the published {', '.join(changed)} (edited?)", False))
    if not _inside(rerun["value"], published):
        return "FAIL: the re-run lies outside the published interval", False
    if not _inside(published["value"], rerun):
        return "FAIL: the published value lies outside the re-run's interval", False
    return "pass (other answers on some images, inside the published interval)", True


def _split(metric: dict) -> list:
    """Each published source with what it measured and whether the score is ranked among its models (its place
    there left out: other answers may move it)."""
    return [{k: v for k, v in source.items() if k != "rank"} for source in metric.get("sources") or []]


def _equal(a, b) -> bool:
    """Equal as JSON holds them: numbers to 1e-9 (lists element by element), anything else exactly."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if numbers:
        return abs(a - b) <= 1e-9
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _inside(value: float, metric: dict) -> bool:
    low, high = metric["ci_low"], metric["ci_high"]
    return low is not None and high is not None and low - 1e-9 <= value <= high + 1e-9


def _show(metric: dict | None) -> str:
    if metric is None or metric["value"] is None:
        return "–"
    ends = ", ".join("–" if v is None else f"{v:.3f}" for v in (metric["ci_low"], metric["ci_high"]))
    return f"{metric['value']:.3f} [{ends}]"
