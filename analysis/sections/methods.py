"""A methods paragraph written from what the analysis recorded while it ran, every number traceable.

Its sentences come from three records, never from an option's default: the experiment as built
(``summary["design"]``, :mod:`analysis.design_record`), what the runners stored with each answer
(planned and measured timing, display calibration, device), and the ``method`` dict each section
recorded of the statistics it ran (:func:`analysis.sections.base.record_method`). ``cuebench analyze
--metric methods`` and ``cuebench report`` run the same analysis, so they print the same paragraph.
"""

from __future__ import annotations

import json

import pandas as pd

from cuebench.words import LANGUAGE, say

from ..load import params_of
from ..psychometric import fixed_level_rows
from .base import ALL, Section, ordered, record_method, recorded_method

PHASES = ("fixation", "stimulus", "mask", "response_window", "iti")
PHASE_NAMES = {"response_window": "response window", "iti": "inter-trial interval"}
DESIGN = "design"
"""``summary`` key of the experiment as built (:func:`analysis.design_record.experiment_record`)."""
WITHDRAWALS = "withdrawals"
"""``summary`` key of how many people withdrew (:func:`analysis.load.withdrawal_count`)."""


def _json(value) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        return json.loads(value)
    return {}


def _value(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _condition(condition: str, levels: list[dict]) -> str:
    """``patch shuffle (grid 3, 6)``: the parameters that vary over the levels with their values in level order,
    then those that stay the same (``bilateral (d/sigma_color 4/50, 6/80; sigma_space 75)``)."""
    keys = list(dict.fromkeys(k for p in levels for k in p))
    varying = [k for k in keys if len({str(p.get(k)) for p in levels}) > 1]
    fixed = [f"{k} {_value(levels[0][k])}" for k in keys if k not in varying and k in levels[0]]
    parts = ([f"{'/'.join(varying)} " + ", ".join("/".join(_value(p.get(k)) for k in varying) for p in levels)]
             if varying else []) + ([", ".join(fixed)] if fixed else [])
    name = str(condition).replace("_", " ")
    return f"{name} ({'; '.join(parts)})" if parts else name


def stimuli_sentence(conditions: dict[str, list[dict]]) -> str:
    """Each condition with its transform's parameters at every level (the levels a figure's axis shows)."""
    parts = [_condition(c, levels) for c, levels in sorted(conditions.items())]
    return f"Stimuli came in {len(parts)} condition(s): " + "; ".join(parts) + "."


def conditions_shown(scored: pd.DataFrame) -> dict[str, list[dict]]:
    """Condition -> the parameters of its levels, from the fixed-level trials answered (when no experiment
    directory records the design); adaptive blocks' levels follow the answers and are left out."""
    fixed = fixed_level_rows(scored).assign(level=lambda d: d["level"].fillna(-1))
    return {condition: [params_of(p) for p in rows.sort_values("level").drop_duplicates("level")["params"]]
            for condition, rows in fixed.groupby("condition")}


def design_sentences(record: dict) -> list[str]:
    """The photos and classes, the trials besides the test trials and their schedule, the Latin square and
    each adaptive block's QUEST+ settings, from the experiment as built."""
    answers = f"the {record['classes']} class labels in {record['label_order']} order" + (
        " plus 'not clear'" if record["not_clear"] else "")
    out = [f"The {record['design']} experiment showed {record['photos']} photo(s); people answered with {answers}."]
    roles = record["trials_by_role"]
    extra = [f"{roles[r]} {r}" for r in ("practice", "catch", "attention") if roles.get(r)]
    schedule = [f"{'practice first' if record['practice_first'] and roles.get('practice') else ''}",
                f"an attention check every {record['attention_every']} trials" if record["attention_every"]
                and roles.get("attention") else "",
                f"a catch trial every {record['catch_every']} trials" if record["catch_every"] and roles.get("catch")
                else "", f"a break every {record['break_every']} trials" if record["break_every"] else ""]
    schedule = [s for s in schedule if s]
    fixed = record.get("fixed_test_trials", roles.get("test", 0))
    pool = record.get("adaptive_pool_trials", 0)
    tests = f"{fixed} fixed-level test trials" + (
        f" (and a pool of {pool} test trials from which the adaptive blocks chose)" if pool else "")
    out.append(f"Besides its {tests} the experiment held "
               + (", ".join(extra) + " trial(s)" if extra else "no practice, catch or attention trials")
               + (f" ({', '.join(schedule)})" if schedule else "") + "; catch and attention trials never enter "
               "accuracy.")
    square = record.get("assignment")
    if square:
        out.append(f"Conditions rotated over {square['groups']} participant groups as a Latin square: each person "
                   f"saw each of the {square['images']} photos once, in one of {square['arms']} condition x level "
                   f"arms.")
    for plan in record.get("adaptive", []):
        prior = (f"a normal prior on the threshold (mean {plan['prior_mean']:g}, SD {plan['prior_sd']:g})"
                 if plan["prior_mean"] is not None else "a uniform prior on the threshold")
        stop = (f", or fewer once the 95 % interval was narrower than {plan['stop_ci_width']:g}"
                if plan["stop_ci_width"] else "")
        low, high, count = plan["thresholds"]
        beta = plan.get("people_lapse_prior")
        lapse_prior = (f"a Beta({beta[0]:g}, {beta[1]:g}) prior over them for people and a flat one for models"
                       if beta else "a flat prior over them")
        out.append(f"An adaptive block over {str(plan['condition']).replace('_', ' ')} chose each trial's "
                   f"{plan['axis']} among {', '.join(_value(v) for v in plan['values'])} by QUEST+ (Watson 2017) "
                   f"for {plan['trials']} trials{stop}, with guess rate {plan['guess_rate']:.3g}, {count} "
                   f"threshold(s) from {low:g} to {high:g}, spreads {', '.join(_value(v) for v in plan['spreads'])}, "
                   f"lapse rates {', '.join(_value(v) for v in plan['lapses'])} ({lapse_prior}) and {prior}.")
    if record.get("language"):
        out.append(f"Participants read the study in {say('language_name', record['language'])}: its texts and "
                   "every screen of the task.")
    names = record.get("shown_names")
    if names and any(shown != label for label, shown in names.items()):
        language = say("language_name", record.get("language") or LANGUAGE)
        out.append(f"The answer buttons named the classes in {language} ("
                   + ", ".join(f"{shown} for {label}" for label, shown in names.items())
                   + "); answers are reported under the labels.")
    elif names:
        out.append(f"The answer buttons showed the class labels themselves ({', '.join(names)}).")
    return out


def timing_sentence(humans: pd.DataFrame) -> str | None:
    """Planned phase durations in ms (and frames) as the runners recorded them per trial, the response window
    (or none), the refresh rate, and the measured stimulus duration."""
    planned = [_json(v) for v in humans["timing_planned"]] if "timing_planned" in humans else []
    planned = [p for p in planned if p]
    if not planned:
        return None
    frames = [_json(v) for v in humans["frames"]] if "frames" in humans else []
    phases = []
    for phase in PHASES:
        recorded = [p[phase] for p in planned if phase in p]
        ms = pd.Series(recorded, dtype=float).dropna()
        if phase == "response_window" and recorded and len(ms) < len(recorded):
            phases.append("no response deadline" if not len(ms) else
                          f"a response window of {ms.median():g} ms on {len(ms)} of {len(recorded)} trials")
            continue
        if not len(ms):
            continue
        n_frames = pd.Series([f.get(phase) for f in frames if f], dtype=float).dropna()
        in_frames = f" ({n_frames.median():g} frames)" if len(n_frames) else ""
        phases.append(f"{PHASE_NAMES.get(phase, phase)} {ms.median():g} ms{in_frames}")
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


def _sized_people(humans: pd.DataFrame) -> pd.DataFrame | None:
    """One ``device`` record per person whose images had a size in degrees; None when nobody's had."""
    devices = pd.DataFrame([_json(v) for v in humans.get("device", [])])
    if "stimulus_degrees" not in devices or devices["stimulus_degrees"].isna().all():
        return None
    sized = devices.dropna(subset=["stimulus_degrees"]).assign(observer=humans["observer"].to_numpy()[
        devices["stimulus_degrees"].notna().to_numpy()])
    return sized.drop_duplicates("observer")


def _web_people(humans: pd.DataFrame) -> pd.DataFrame:
    """The people of :func:`_sized_people` calibrated in the browser (they have pixels per mm)."""
    people = _sized_people(humans)
    if people is None or "px_per_mm" not in people:
        return pd.DataFrame(columns=["px_per_mm"])
    return people.dropna(subset=["px_per_mm"])


def display_sentence(humans: pd.DataFrame) -> str | None:
    """The image size in degrees of visual angle and how it was set, from what each runner recorded
    in its rows' ``device``: the lab's declared viewing distance and screen width, the web task's
    per-person calibration (pixels per mm from a card, viewing distance entered or measured from the
    blind spot)."""
    people = _sized_people(humans)
    if people is None:
        return None
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
            parts.append(_web_calibration(web))
    degrees = people["stimulus_degrees"].median()
    return f"Images were {degrees:g} degrees of visual angle wide, " + " and ".join(parts) + "."


def card_not_moved(web: pd.DataFrame) -> pd.Series:
    """Per person of the browser: whether the card slider was never moved (``card_moved`` False, recorded by the
    server from the calibration), so the pixels per mm are the browser's default, not a measure. Rows from
    before it was recorded count as measured."""
    return web.get("card_moved", pd.Series(index=web.index, dtype=object)).map(lambda moved: moved is False)


def _web_calibration(web: pd.DataFrame) -> str:
    """The browser's calibration: the card's median pixels per mm over the people who matched it, and "not
    measured" for those who left the slider where it started."""
    unmoved = card_not_moved(web)
    matched = web[~unmoved]
    tail = f"{_viewing_distance(web)}, images {web['stimulus_css_px'].median():.0f} CSS px; {_people(len(web))}"
    if not len(matched):
        return (f"in the browser with the card calibration not measured (nobody moved the card slider, so the "
                f"browser's default {web['px_per_mm'].median():.2f} px/mm stood; {tail})")
    skipped = f", not measured for {_people(int(unmoved.sum()))} who left the card slider unmoved" if unmoved.any() \
        else ""
    return (f"in the browser after a screen calibration with a credit card (median {matched['px_per_mm'].median():.2f} "
            f"px/mm{skipped}, {tail})")


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


EXCLUDED_BY = {"browser check": "screened out by the browser check", "browser-check":
               "screened out by the browser check", "attention check": "failed the attention check"}
"""Who logged an exclusion -> the words of the paper; anyone else (admin, cli) is the experimenter, whose
details stay in the exclusion log."""


def exclusion_cause(row) -> str:
    """A paper's words for why an observer was excluded: the analysis' own rule as it states it, or the kind of
    logged decision (:data:`EXCLUDED_BY`), never an operator's note."""
    by = getattr(row, "by", None)
    if isinstance(by, str) and by:
        return EXCLUDED_BY.get(by, "excluded by the experimenter (reason in the exclusion log)")
    return str(row.reason)


def runners_of(humans: pd.DataFrame) -> dict[str, int]:
    """People per runner, from what each runner recorded in ``device``: the PsychoPy lab or the browser."""
    seen: dict[str, set] = {"in the lab (PsychoPy)": set(), "in the browser": set()}
    for observer, device in zip(humans["observer"], humans.get("device", pd.Series(index=humans.index))):
        info = _json(device)
        if info.get("runner") == "psychopy":
            seen["in the lab (PsychoPy)"].add(observer)
        elif "user_agent" in info or "px_per_mm" in info:
            seen["in the browser"].add(observer)
    return {where: len(who) for where, who in seen.items() if who}


def participants_sentence(scored: pd.DataFrame, excluded: pd.DataFrame, withdrawals: int = 0) -> str:
    """People analysed and where they took part, every person excluded entirely by cause (those screened
    out before their first trial too: the analysis merges the exclusion log in), and how many withdrew after
    taking part (``cuebench withdraw`` erased their data and kept only the count)."""
    humans = scored[scored["observer_kind"] == "human"]
    count = humans["observer"].nunique()
    text = f"{count} {'participant was' if count == 1 else 'participants were'} analysed"
    runners = runners_of(humans)
    if runners:
        text += " (" + ", ".join(f"{n} {where}" for where, n in runners.items()) + ")"
    if len(excluded):
        causes = pd.Series([exclusion_cause(row) for row in excluded.itertuples()], dtype=object).value_counts()
        text += "; excluded entirely: " + "; ".join(f"{n} {cause}" for cause, n in sorted(causes.items()))
    if withdrawals:
        text += (f"; {_people(withdrawals)} withdrew after taking part and {'their' if withdrawals > 1 else 'the'} "
                 f"data were erased")
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


def builds_on_first(sections: list[Section]) -> list[Section]:
    """``sections`` in their order, each moved after the sections it depends on (a stable topological order)."""
    by_name, placed, out = {s.name: s for s in sections}, set(), []

    def place(section):
        if section.name in placed:
            return
        placed.add(section.name)
        for dep in section.depends:
            if dep in by_name:
                place(by_name[dep])
        out.append(section)

    for section in sections:
        if ALL not in section.depends:
            place(section)
    return out


def section_sentences(result) -> list[str]:
    """The sentence each section recorded of what it ran (:func:`analysis.sections.base.record_method`), in report
    order except that a section comes after those it ``depends`` on (accuracy before the reliance built on it);
    a section that recorded none is left out."""
    out = []
    for section in builds_on_first(ordered(result.sections)):
        method = recorded_method(result.summary, section.name)
        sentence = section.method_sentence(method) if method is not None and section.name in result.sections else None
        if sentence:
            out.append(sentence)
    return out


def paragraph(result, scored: pd.DataFrame) -> str:
    """The methods paragraph from what the analysis recorded: the design as built, the runners' timing and
    display, the people and exclusions, the models, and each section's recorded method."""
    humans = scored[scored["observer_kind"] == "human"]
    excluded = result.tables.get("excluded_observers", pd.DataFrame(columns=["observer", "reason"]))
    record = result.summary.get(DESIGN)
    withdrawals = int(result.summary.get(WITHDRAWALS, 0))
    people = participants_sentence(scored, excluded, withdrawals)
    record_method(result, "participants", people, analysed=int(humans["observer"].nunique()),
                  excluded=int(len(excluded)), withdrawals=withdrawals)
    display = display_sentence(humans) if len(humans) else None
    if display:
        web = _web_people(humans)
        record_method(result, "display", display, card_not_measured=int(card_not_moved(web).sum()),
                      card_measured=int((~card_not_moved(web)).sum()))
    sentences = [*(design_sentences(record) if record else []),
                 stimuli_sentence(record["conditions"] if record else conditions_shown(scored)),
                 timing_sentence(humans) if len(humans) else None, display, people,
                 trial_exclusions_sentence(result.tables.get("exclusions", pd.DataFrame()), excluded),
                 models_sentence(scored), *section_sentences(result)]
    return " ".join(s for s in sentences if s)


class Methods(Section):
    """A methods paragraph from the data: stimuli, timing, participants, exclusions, models, statistics."""

    name = "methods"
    title = "Methods (draft from the data)"
    order = 1000
    metrics = {"methods": "methods"}
    needs = "scored trials"
    adaptive_blocks = True
    depends = (ALL,)

    def compute(self, result, scored, options, n_choices):
        text = paragraph(result, scored)
        result.tables["methods"] = pd.DataFrame({"paragraph": [text]})
        result.summary["methods"] = text
        return None
