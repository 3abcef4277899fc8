"""Scorecards: one model's scores on one benchmark plug-in (``analysis.benchmarks``), each with an interval that
holds at small n, set beside the published values only where the run measured what the references measured.

**Unit and interval.** Every metric is a formula over proportions (the benchmark's cells), and each proportion
is counted over source images, not trials: an image answered several times counts once, with its mean. A
one-cell metric gets the Jeffreys interval, the Beta(k + 1/2, n - k + 1/2) quantiles with the lower end 0 at
k = 0 and the upper end 1 at k = n (Brown, Cai & DasGupta 2001, Sec. 4.1.2): unlike a percentile bootstrap it
never collapses to zero width at 7 of 7. A formula over several cells (relative accuracy, R_cd, S_cd) carries each
cell's exact Beta bounds through the formula (:func:`interval`); the cells share their images, and drawing
them independently widens the interval of a ratio whose parts move together, so coverage errs on the safe
side (``tests/analysis/test_scorecard_intervals.py`` checks coverage and false claims from the documented
model).

**Comparable or not ranked, source by source.** Each published source a metric is set beside says what it
measured (:class:`analysis.benchmarks.Published`). A score is placed among a source's models, and compared with
its people, only when the run scored the image list that source measured
(:func:`analysis.benchmarks.image_list_hash`), answered with that source's decision rule, and every cell has at
least :data:`MIN_IMAGES` images; it is ranked among the models of every such source together. Each other source
is shown for context with one sentence saying why it is not in the rank (:func:`source_differs`); where no
source is left, the scorecard gives the score and its interval with one sentence saying why there is no rank
(:func:`why_not_ranked`). A rank's interval ends give the ranks the model could hold; where they differ by more
than :data:`RANK_SLACK`, the note says the benchmark is too small to rank the model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from . import reference
from .benchmarks import Benchmark, Cell, Metric, Published, image_list_hash
from .load import params_of

CONFIDENCE = 0.95
MIN_IMAGES = 30
"""Images per cell below which a score is neither ranked nor said to lie beyond the people."""
RANK_SLACK = 2
"""Ranks an interval may span before the scorecard calls the benchmark too small to rank the model."""
DRAWS = 10_000
"""Draws per end of a several-cell formula's interval (quantile error about 0.003)."""
INTERVAL_METHOD = ("over source images: Jeffreys interval of a proportion; exact Beta bounds of each proportion "
                   "carried through a formula of several (ratios, R_cd, S_cd)")


def cell_counts(trials: pd.DataFrame, cell: Cell) -> tuple[float, int]:
    """(k, n) of one cell over source images: each image's mean success, summed, and the number of images
    with any scored trial in the cell."""
    rows = trials[cell.select(trials)]
    image = rows["source_image"].where(rows["source_image"].notna(), rows["trial_id"])
    per_image = cell.success(rows).groupby(image).mean().dropna()
    return float(per_image.sum()), int(len(per_image))


def jeffreys(k: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Jeffreys interval of k successes in n (Brown, Cai & DasGupta 2001): Beta(k + 1/2, n - k + 1/2) quantiles,
    0 as the lower end at k = 0 and 1 as the upper end at k = n."""
    if n == 0:
        return np.nan, np.nan
    tail = (1 - confidence) / 2
    low = 0.0 if k <= 0 else float(stats.beta.ppf(tail, k + 0.5, n - k + 0.5))
    high = 1.0 if k >= n else float(stats.beta.ppf(1 - tail, k + 0.5, n - k + 0.5))
    return low, high


def interval(metric: Metric, counts: list[tuple[float, int]], confidence: float = CONFIDENCE, seed: int = 0
             ) -> tuple[float, float]:
    """The metric's interval from its cells' (k, n): Jeffreys through a one-cell formula (monotone).
    A formula of several cells gets exact Beta bounds carried through it: for the lower end each cell is drawn
    from the Beta distribution of its exact (Clopper-Pearson) bound on the side that lowers the formula,
    Beta(k, n - k + 1) where the formula increases with the cell and Beta(k + 1, n - k) where it decreases
    (``Metric.directions``), and the lower quantile taken; the upper end mirrors it. For one cell this is the
    Clopper-Pearson interval; for a ratio it keeps both tails at or under their nominal rate (simulated)."""
    if any(n == 0 for _, n in counts):
        return np.nan, np.nan
    if len(counts) == 1:   # a monotone formula of one proportion: its ends, in order (1 - p falls as p rises)
        low, high = sorted(float(metric.formula(end)) for end in jeffreys(*counts[0], confidence))
        return low, high
    rng = np.random.default_rng(seed)
    tail = (1 - confidence) / 2
    ends = []
    for side, quantile in ((-1, tail), (1, 1 - tail)):
        draws = [_bound_draws(k, n, side * direction >= 0, rng) for (k, n), direction in zip(counts, metric.directions)]
        with np.errstate(invalid="ignore", divide="ignore"):
            values = np.asarray(metric.formula(*draws), dtype=float)
        if np.isnan(values).all():
            return np.nan, np.nan
        values = np.where(np.isnan(values), np.inf * side, values)   # undefined: this end's far side, never a claim
        ends.append(float(np.quantile(values, quantile, method="inverted_cdf")))
    return ends[0], ends[1]


def _bound_draws(k: float, n: int, upper: bool, rng) -> np.ndarray:
    """Draws from the Beta distribution of the exact upper (Beta(k + 1, n - k); 1 at k = n) or lower (Beta(k,
    n - k + 1); 0 at k = 0) confidence bound of k successes in n."""
    if upper:
        return np.ones(DRAWS) if k >= n else rng.beta(k + 1, n - k, DRAWS)
    return np.zeros(DRAWS) if k <= 0 else rng.beta(k, n - k + 1, DRAWS)


def rank(value: float, models: tuple[tuple[str, float], ...]) -> int:
    """1 + the published models scoring above ``value`` (1 is the top)."""
    return 1 + sum(1 for _, v in models if np.isfinite(v) and v > value)


def source_differs(source: Published, images: set, rules: list[str]) -> str | None:
    """How ``source`` measured other than the run (a clause); None when it measured the run's image list with
    the run's decision rule."""
    theirs = source.measured_on
    if theirs.images is None and source.decision_rule is None:
        return "the paper states neither the images nor the decision rule it measured with"
    if theirs.images is None:
        return "the paper does not say which images it measured"
    if theirs.image_list_hash is None:
        return (f"the reference measured the {_images(theirs.images)} of {theirs.description}, and this run scored "
                f"{_images(len(images))} of another set")
    run = image_list_hash(images)
    if run != theirs.image_list_hash:
        return (f"this run scored {_images(len(images))} (image list {run[:12]}), not the {_images(theirs.images)} "
                f"of {theirs.description} (image list {theirs.image_list_hash[:12]}) that the reference measured")
    if source.decision_rule is None:
        return "the paper does not state the decision rule that turned the models' outputs into answers"
    if rules != [source.decision_rule]:
        return (f"the model answered with the decision rule {', '.join(rules) or 'unknown'}, and the reference "
                f"decided with {source.decision_rule}")
    return None


def why_not_ranked(metric: Metric, differs: list[str | None], fewest: str, n: int) -> str | None:
    """One sentence saying why the score is neither ranked nor compared with people; None when it may be.
    ``differs``: :func:`source_differs` per source, in the metric's order (the ranking reference first);
    ``fewest``: what the smallest cell counts, ``n`` its size."""
    if metric.not_ranked_because:
        return metric.not_ranked_because
    prefix = "Not ranked or compared with people: "
    if not differs:
        return f"{prefix}no published values were measured this way."
    if None not in differs:
        return f"{prefix}{differs[0]}."
    if n < MIN_IMAGES:
        return f"{prefix}{fewest}, fewer than the {MIN_IMAGES} a rank or a comparison with people needs."
    return None


def context(source: Published, why: str) -> str:
    """The sentence for a source shown for context and kept out of the rank."""
    values = []
    if scores := [v for _, v in source.models]:
        spread = f"{scores[0]:.3g}" if len(scores) == 1 else f"{min(scores):.3g}-{max(scores):.3g}"
        values.append(f"{len(scores)} model{'' if len(scores) == 1 else 's'} ({spread})")
    if source.human is not None:
        values.append(f"people {source.human:.3g}")
    return f"{source.citation}: {' and '.join(values) or 'no values'}, shown for context and not ranked: {why}."


def _images(n: int) -> str:
    return f"{n:,} image" + ("" if n == 1 else "s")


def score(bench: Benchmark, trials: pd.DataFrame, everyone: pd.DataFrame | None = None, seed: int = 0
          ) -> list[dict]:
    """Every metric of ``bench`` on one observer's scored trials, as scorecard entries; ``everyone``: all
    observers' trials of the same experiment (for metrics normalised over the models on the same stimuli)."""
    trials = _parsed(trials)
    everyone = trials if everyone is None else _parsed(everyone)
    images = set(trials["source_image"].dropna())
    rules = sorted({str(r) for r in trials.get("decision_rule", pd.Series(dtype=object)).dropna()})
    return [entry(bench, metric, [cell_counts(trials, cell) for cell in metric.cells], images, rules,
                  trials=len(trials), seed=seed)
            for metric in bench.metrics(everyone)]


def entry(bench: Benchmark, metric: Metric, counts: list[tuple[float, int]], images: set, rules: list[str],
          trials: int = 0, seed: int = 0) -> dict:
    """One scorecard entry from the metric's cell counts (k, n) and what the run scored with which rules: ranked
    among the models of the sources measured as the run was, the others listed apart for context."""
    with np.errstate(invalid="ignore", divide="ignore"):
        value = float(metric.formula(*(np.float64(k) / n if n else np.float64(np.nan) for k, n in counts)))
    # an undefined score (a ratio over 0 correct originals) has no value and no interval
    low, high = interval(metric, counts, seed=seed) if np.isfinite(value) else (np.nan, np.nan)
    value = value if np.isfinite(value) else np.nan
    sources = metric.published()
    differs = [source_differs(s, images, rules) for s in sources]
    n, smallest = min(((n, i) for i, (_, n) in enumerate(counts)), default=(0, None))
    fewest = f"{n:,} {metric.cells[smallest].counted}" if smallest is not None else "no images"
    reason = why_not_ranked(metric, differs, fewest, n)
    comparable = reason is None
    ranked = [comparable and why is None for why in differs]
    people = next((s for s, r in zip(sources, ranked) if r and s.human is not None), None)
    models = tuple(m for s, r in zip(sources, ranked) if r for m in s.models)
    # where the first source's difference is the not-ranked sentence, it is not said again as context
    said = 0 if reason and metric.not_ranked_because is None and differs and None not in differs else None
    out = {"benchmark": bench.name, "metric": metric.name, "description": metric.description,
           "value": value, "ci_low": low, "ci_high": high, "interval": INTERVAL_METHOD, "trials": int(trials),
           "images": {cell.name: n for cell, (_, n) in zip(metric.cells, counts)},
           "counts": {cell.name: [k, n] for cell, (k, n) in zip(metric.cells, counts)}, "fewest": fewest,
           "comparable": comparable, "not_ranked_because": reason,
           "human": people.human if people else None, "human_label": people.human_label if people else "",
           "human_range": list(people.human_range) if people and people.human_range else None,
           "references": [{"id": r, "label": reference.label(r), "version": reference.reference(r).version}
                          for r in dict.fromkeys(r for s in sources for r in s.reference_ids)],
           "sources": [_source(s, r, why, value) for s, r, why in zip(sources, ranked, differs)],
           "published_models": len(models), "rank": None, "rank_range": None,
           "context": [context(s, why) for i, (s, why) in enumerate(zip(sources, differs))
                       if why is not None and i != said]}
    if models and np.isfinite(value):
        out["rank"] = rank(value, models)
        if np.isfinite(low) and np.isfinite(high):
            out["rank_range"] = [rank(high, models), rank(low, models)]
    out["notes"] = notes(out)
    return out


def _source(source: Published, ranked: bool, why: str | None, value: float) -> dict:
    """A source as the scorecard records it: what it measured, whether the score is ranked among its models
    (and where), and otherwise why not."""
    theirs = source.measured_on
    return {"citation": source.citation, "references": list(source.reference_ids), "measured_on": theirs.description,
            "images": theirs.images, "image_list_hash": theirs.image_list_hash, "decision_rule": source.decision_rule,
            "models": len(source.models), "human": source.human, "ranked": ranked,
            "rank": rank(value, source.models) if ranked and source.models and np.isfinite(value) else None,
            "not_ranked_because": why}


def _parsed(trials: pd.DataFrame) -> pd.DataFrame:
    trials = trials.reset_index(drop=True)
    if "params" in trials:
        trials["params"] = trials["params"].map(params_of)
    return trials


def beyond_people(entry: dict) -> str | None:
    """The note for a comparable score whose whole interval lies above the people (their individual range where
    the table lists them, else their published value); None otherwise."""
    if not entry.get("comparable") or entry["human"] is None or not np.isfinite(entry["ci_low"]):
        return None
    if entry["human_range"]:   # people listed one by one: beyond them means beyond every one of them
        low, high = entry["human_range"]
        if entry["ci_low"] <= high:
            return None
        return (f"the score lies above the range of the individual people ({low:.3g}-{high:.3g}), even at its "
                "interval's lower end: the model differs from people, in the other direction")
    if entry["ci_low"] > entry["human"]:
        return f"the score exceeds the published human value ({entry['human']:.3g}) beyond its interval"
    return None


def notes(entry: dict) -> list[str]:
    """Plain-language remarks a reader needs before trusting a number."""
    if entry["value"] is None or not np.isfinite(entry["value"]):
        reason = [entry["not_ranked_because"]] if entry.get("not_ranked_because") else []
        return ["no score: the benchmark's trials do not define this metric for the model.", *reason]
    if not entry.get("comparable"):
        return [entry["not_ranked_because"]]
    out = [note] if (note := beyond_people(entry)) else []
    if entry["rank_range"] and entry["rank_range"][1] - entry["rank_range"][0] > RANK_SLACK:
        out.append(f"too small to rank: with {entry['fewest']}, the 95 % interval spans ranks "
                   f"{entry['rank_range'][0]}-{entry['rank_range'][1]} of {entry['published_models'] + 1}")
    if not entry["published_models"]:
        out.append("no published model values to rank against")
    return out
