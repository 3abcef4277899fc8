"""A methods paragraph written from the responses themselves, every number traceable to a table."""

from __future__ import annotations

import json

import pandas as pd

from ..load import params_of
from ..metrics import MIN_T_OBSERVERS
from ..psychometric import TREND_ALPHA
from .base import Section, register

PHASES = ("fixation", "stimulus", "mask")


def _json(value) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        return json.loads(value)
    return {}


def stimuli_sentence(scored: pd.DataFrame) -> str:
    """Each condition with the range of every parameter that varies over its levels."""
    parts = []
    for condition, rows in scored.groupby("condition"):
        params = [params_of(p) for p in rows.drop_duplicates("level")["params"]]
        keys = [k for k in dict.fromkeys(k for p in params for k in p) if len({str(p.get(k)) for p in params}) > 1]
        ranges = []
        for key in keys:
            values = sorted({p[key] for p in params if isinstance(p.get(key), (int, float))})
            if values:
                ranges.append(f"{key} {values[0]:g} to {values[-1]:g}")
        levels = rows["level"].nunique()
        detail = f" ({levels} levels; {', '.join(ranges)})" if ranges else (f" ({levels} levels)" if levels > 1 else "")
        parts.append(f"{str(condition).replace('_', ' ')}{detail}")
    return f"Stimuli came in {len(parts)} condition(s): " + "; ".join(parts) + "."


def timing_sentence(humans: pd.DataFrame) -> str | None:
    """Planned phase durations in ms and frames, the refresh rate, and the measured stimulus duration."""
    planned = [_json(v) for v in humans["timing_planned"]] if "timing_planned" in humans else []
    planned = [p for p in planned if p]
    if not planned:
        return None
    frames = [_json(v) for v in humans["frames"]] if "frames" in humans else []
    phases = []
    for phase in PHASES:
        ms = pd.Series([p.get(phase) for p in planned], dtype=float).dropna()
        if not len(ms):
            continue
        n_frames = pd.Series([f.get(phase) for f in frames if f], dtype=float).dropna()
        in_frames = f" ({n_frames.median():g} frames)" if len(n_frames) else ""
        phases.append(f"{phase} {ms.median():g} ms{in_frames}")
    text = "Each trial showed " + ", ".join(phases)
    refresh = pd.to_numeric(humans.get("refresh_hz"), errors="coerce").dropna()
    if len(refresh):
        text += f" on displays refreshing at {refresh.median():.0f} Hz"
    measured = pd.Series([_json(v).get("stimulus") for v in humans.get("timing_measured", [])], dtype=float).dropna()
    if len(measured):
        text += (f"; the measured stimulus duration was {measured.mean():.1f} ms on average "
                 f"(SD {measured.std(ddof=1) if len(measured) > 1 else 0:.1f} ms, {len(measured)} trials)")
    return text + "."


def _people(n: int) -> str:
    return f"{n} {'person' if n == 1 else 'people'}"


def display_sentence(humans: pd.DataFrame) -> str | None:
    """The image size in degrees of visual angle and how it was set, from what each runner recorded
    in its rows' ``device``: the lab's declared viewing distance and screen width, the web task's
    per-person calibration (pixels per mm from a card, viewing distance entered or measured from the
    blind spot)."""
    devices = pd.DataFrame([_json(v) for v in humans.get("device", [])])
    if "stimulus_degrees" not in devices or devices["stimulus_degrees"].isna().all():
        return None
    sized = devices.dropna(subset=["stimulus_degrees"]).assign(observer=humans["observer"].to_numpy()[
        devices["stimulus_degrees"].notna().to_numpy()])
    people = sized.drop_duplicates("observer")
    parts = []
    if "screen_width_cm" in people:
        lab = people.dropna(subset=["screen_width_cm"])
        if len(lab):
            parts.append(f"in the lab at {lab['viewing_distance_cm'].median():g} cm from a "
                         f"{lab['screen_width_cm'].median():g} cm wide screen ({lab['stimulus_px'].median():g} px; "
                         f"{_people(len(lab))})")
    if "px_per_mm" in people:
        web = people.dropna(subset=["px_per_mm"])
        if len(web):
            parts.append(f"in the browser after a screen calibration with a credit card (median "
                         f"{web['px_per_mm'].median():.2f} px/mm, {_viewing_distance(web)}, images "
                         f"{web['stimulus_css_px'].median():.0f} CSS px; {_people(len(web))})")
    degrees = people["stimulus_degrees"].median()
    return f"Images were {degrees:g} degrees of visual angle wide, " + " and ".join(parts) + "."


def _viewing_distance(web: pd.DataFrame) -> str:
    """The web viewing distance and how people gave it (rows from before the blind-spot measure: entered)."""
    median = f"{web['viewing_distance_cm'].median():g} cm"
    measured = int((web.get("distance_method", pd.Series(index=web.index, dtype=object)) == "blind-spot").sum())
    if measured == 0:
        return f"entered viewing distance median {median}"
    if measured == len(web):
        return f"viewing distance measured from the blind spot, median {median}"
    return (f"viewing distance median {median}, measured from the blind spot for {_people(measured)} and entered "
            f"by {len(web) - measured}")


def participants_sentence(scored: pd.DataFrame, excluded: pd.DataFrame) -> str:
    """People analysed, and every observer excluded entirely with the reason (those screened out before their
    first trial too, once ``analysis.report.write_report`` has merged the exclusion log in)."""
    humans = scored.loc[scored["observer_kind"] == "human", "observer"].nunique()
    text = f"{humans} {'participant was' if humans == 1 else 'participants were'} analysed"
    if len(excluded):
        reasons = excluded.groupby("reason")["observer"].count()
        text += "; excluded entirely: " + "; ".join(f"{n} for {reason}" for reason, n in reasons.items())
    return text + "."


def trial_exclusions_sentence(log: pd.DataFrame, excluded: pd.DataFrame) -> str | None:
    """Test trials left out of the observers who stay in the analysis (timeouts, left the page, dropped
    frames, ...), counted per reason, most frequent first; None when there are none."""
    if log.empty:
        return None
    trials = log[(log["role"] == "test") & ~log["observer"].isin(set(excluded.get("observer", [])))]
    if trials.empty:
        return None
    counts = sorted(trials["reason"].value_counts().items(), key=lambda item: (-item[1], item[0]))
    return (f"Of the analysed observers' test trials, {len(trials)} {'was' if len(trials) == 1 else 'were'} "
            f"excluded: " + ", ".join(f"{n} {reason}" for reason, n in counts) + ".")


def models_sentence(scored: pd.DataFrame) -> str | None:
    models = scored[scored["observer_kind"] == "model"]
    if models.empty:
        return None
    rules = models.groupby("observer")["decision_rule"].first().fillna("not recorded")
    listed = ", ".join(f"{m} (decision rule {r})" for m, r in rules.items())
    return f"{len(rules)} model(s) answered the same trials: {listed}."


def scoring_sentence(scored: pd.DataFrame, n_choices: int) -> str:
    return (f"Accuracy was scored over {len(scored)} test trials with C = {n_choices} answer choices (chance 1/C); "
            f"proportions carry Wilson 95 % intervals.")


def statistics_sentence(result, options) -> str | None:
    """What the analysis actually ran, each with the numbers it ran on: psychometric fits and their trend
    gate, QUEST+ pooling, t-intervals, bootstrap intervals, noise ceilings, paired t-tests, rank tests."""
    t, parts = result.tables, []
    fits = t.get("thresholds")
    if fits is not None and len(fits):
        gated = int(fits["note"].fillna("").str.startswith("not fitted: flat data").sum())
        parts.append(f"psychometric functions fitted with psignifit (Schütt et al. 2016) to {len(fits)} observer x "
                     f"condition series{' (people also pooled)' if (fits['fit'] == 'pooled').any() else ''}, each "
                     f"only after a Cochran-Armitage trend test found accuracy falling with the level at p < "
                     f"{TREND_ALPHA:g} ({gated} left unfitted as flat)")
    adaptive = t.get("adaptive_thresholds")
    if adaptive is not None and len(adaptive):
        blocks = int((adaptive["fit"] == "individual").sum())
        pooled = adaptive.loc[adaptive["fit"] == "pooled", "observer_kind"].tolist()
        parts.append(f"QUEST+ posterior thresholds (Watson 2017) of {blocks} adaptive block(s)"
                     + (f", pooled over the {' and '.join(k + 's' for k in pooled)} by inverse-variance weighting"
                        if pooled else ""))
    groups = [g for g in (t.get("group_accuracy"), t.get("group_relative_accuracy")) if g is not None and len(g)]
    if any(g["t_ci_low"].notna().any() for g in groups):
        parts.append(f"t-intervals across observers (from {MIN_T_OBSERVERS} observers of a kind on)")
    booted = ["means over observers"] if any(g["boot_ci_low"].notna().any() for g in groups) else []
    if "error_consistency" in t and t["error_consistency"]["kappa_ci_low"].notna().any():
        booted.append("error consistency over trials")
    if booted:
        parts.append(f"percentile bootstrap intervals ({options.n_boot} resamples) of {' and of '.join(booted)}")
    if "noise_ceilings" in t:
        parts.append("leave-one-out and split-half noise ceilings (Nili et al. 2014)")
    tests = t.get("ttests")
    if tests is not None and "p" in tests and tests["p"].notna().any():
        parts.append(f"{int(tests['p'].notna().sum())} paired two-sided t-tests of people against each model per "
                     f"condition and level (pingouin; {options.correction} correction at alpha {options.alpha:g})")
    if result.friedman is not None:
        parts.append(f"a Friedman test with the Iman-Davenport correction and Nemenyi post-hoc comparisons "
                     f"(Demšar 2006) of {result.friedman.n_methods} methods over {result.friedman.n_blocks} blocks")
    if not parts:
        return None
    return "Statistics: " + "; ".join(parts) + "."


def paragraph(result, scored: pd.DataFrame, options, n_choices: int) -> str:
    """The methods paragraph from the analysis as it stands (tables, exclusions, what ran)."""
    humans = scored[scored["observer_kind"] == "human"]
    excluded = result.tables.get("excluded_observers", pd.DataFrame(columns=["observer", "reason"]))
    sentences = [stimuli_sentence(scored), timing_sentence(humans) if len(humans) else None,
                 display_sentence(humans) if len(humans) else None, participants_sentence(scored, excluded),
                 trial_exclusions_sentence(result.tables.get("exclusions", pd.DataFrame()), excluded),
                 models_sentence(scored), scoring_sentence(scored, n_choices), statistics_sentence(result, options)]
    return " ".join(s for s in sentences if s)


@register
class Methods(Section):
    """A methods paragraph from the data: stimuli, timing, participants, exclusions, models, statistics."""

    name = "methods"
    title = "Methods (draft from the data)"
    order = 1000
    metrics = {"methods": "methods"}
    needs = "scored trials"
    adaptive_blocks = True

    def compute(self, result, scored, options, n_choices):
        text = paragraph(result, scored, options, n_choices)
        result.tables["methods"] = pd.DataFrame({"paragraph": [text]})
        result.summary["methods"] = text
        return None
