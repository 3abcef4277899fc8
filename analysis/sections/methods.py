"""A methods paragraph written from the responses themselves, every number traceable to a table."""

from __future__ import annotations

import json

import pandas as pd

from ..load import params_of
from ..metrics import MIN_T_OBSERVERS
from .base import SECTIONS, Section, register

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
    """People analysed, and every observer excluded entirely with the reason."""
    humans = scored.loc[scored["observer_kind"] == "human", "observer"].nunique()
    text = f"{humans} participant(s) were analysed"
    if len(excluded):
        reasons = excluded.groupby("reason")["observer"].count()
        text += "; excluded entirely: " + "; ".join(f"{n} for {reason}" for reason, n in reasons.items())
    return text + "."


def models_sentence(scored: pd.DataFrame) -> str | None:
    models = scored[scored["observer_kind"] == "model"]
    if models.empty:
        return None
    rules = models.groupby("observer")["decision_rule"].first().fillna("not recorded")
    listed = ", ".join(f"{m} (decision rule {r})" for m, r in rules.items())
    return f"{len(rules)} model(s) answered the same trials: {listed}."


@register
class Methods(Section):
    """A methods paragraph from the data: stimuli, timing, participants, exclusions, models, statistics."""

    name = "methods"
    title = "Methods (draft from the data)"
    order = 1000
    metrics = {"methods": "methods"}
    needs = "scored trials"

    def compute(self, result, scored, options, n_choices):
        humans = scored[scored["observer_kind"] == "human"]
        shown = [SECTIONS[name].title for name in result.sections if name != self.name]
        sentences = [stimuli_sentence(scored), timing_sentence(humans) if len(humans) else None,
                     display_sentence(humans) if len(humans) else None,
                     participants_sentence(scored, result.tables.get("excluded_observers", pd.DataFrame())),
                     models_sentence(scored),
                     f"Accuracy was scored over {len(scored)} test trials with C = {n_choices} answer choices "
                     f"(chance 1/C); the analysis reports {', '.join(shown).lower() or 'accuracy'} "
                     f"(cuebench; intervals are Wilson or bootstrap intervals clipped to their scale, "
                     f"t-intervals from {MIN_T_OBSERVERS} observers on, {options.n_boot} bootstrap resamples, "
                     f"{options.correction} correction over the human-model t-tests at alpha {options.alpha})."]
        paragraph = " ".join(s for s in sentences if s)
        result.tables["methods"] = pd.DataFrame({"paragraph": [paragraph]})
        result.summary["methods"] = paragraph
        return None
