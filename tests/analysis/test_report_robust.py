"""The report on any data: response tables of random size and shape (one person, one trial per level,
all wrong, all timeouts, one class only, models only, humans only, mixed designs) always give a report
whose every number is finite or explicitly empty, and whose sections each show a table, a figure or a
one-line note on what is missing.

A study is drawn as a plain specification (:func:`studies`) and turned into response rows by
:func:`rows_of`, so each case the issue names is also pinned as an ``@example``. The rows carry what real
studies carry: multi-parameter levels (the bilateral filter's d and sigma_color), practice and attention
trials, catch trials, and the QUEST+ posteriors of an adaptive block.
"""

from __future__ import annotations

import json
import math
import re
from html import escape as html_escape
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analysis.report import AnalysisOptions, write_report
from cuebench.responses import ResponseStore

CATEGORIES = ("boat", "car", "cat", "dog")
DESIGNS = ("suppression", "cue_conflict", "oddity", "cue_decomposition")
BEHAVIOURS = ("right", "wrong", "random", "timeout")
SUPPRESSION = [("original", None, {}), ("patch_shuffle", 0, {"grid": 2}), ("patch_shuffle", 1, {"grid": 4}),
               ("patch_shuffle", 2, {"grid": 8}), ("bilateral", 0, {"d": 5, "sigma_color": 50}),
               ("bilateral", 1, {"d": 9, "sigma_color": 110}), ("bilateral", 2, {"d": 12, "sigma_color": 170})]
CUES = [("original", None, {}), ("shape_cue", None, {}), ("texture_cue", None, {})]
ADAPTIVE_CONDITION = "patch_shuffle"
NONE_OR_NAN = re.compile(r"\b(nan|-?inf|infinity)\b", re.IGNORECASE)
SECTION_BLOCK = re.compile(r'<h2 id="([^"]+)">(.*?)(?=<h2 id=|\Z)', re.S)


@st.composite
def studies(draw) -> dict:
    """A random study: observers of either kind (at least one), a mix of designs, a few images per
    cell, one answer behaviour per observer, practice/attention trials and an adaptive block or not."""
    humans = draw(st.integers(0, 3))
    models = draw(st.integers(0 if humans else 1, 2))
    return {"humans": humans, "models": models,
            "designs": sorted(draw(st.sets(st.sampled_from(DESIGNS), min_size=1, max_size=len(DESIGNS)))),
            "categories": draw(st.integers(1, len(CATEGORIES))), "images": draw(st.integers(1, 3)),
            "behaviours": draw(st.lists(st.sampled_from(BEHAVIOURS), min_size=humans + models,
                                        max_size=humans + models)),
            "practice": draw(st.booleans()), "adaptive": draw(st.booleans()), "seed": draw(st.integers(0, 2 ** 16))}


def study(humans=2, models=1, designs=("suppression",), categories=4, images=2, behaviours=None, practice=True,
          adaptive=True, seed=0) -> dict:
    """One named study of the issue's list, everything not named as in a small pilot."""
    return {"humans": humans, "models": models, "designs": list(designs), "categories": categories,
            "images": images, "behaviours": list(behaviours or ["random"] * (humans + models)),
            "practice": practice, "adaptive": adaptive, "seed": seed}


NAMED = {
    "one person": study(humans=1, models=0),
    "one trial per level": study(images=1),
    "all wrong": study(humans=3, models=2, behaviours=["wrong"] * 5),
    "all timeouts": study(humans=2, models=0, behaviours=["timeout"] * 2),
    "one class only": study(categories=1, designs=("suppression", "cue_conflict", "cue_decomposition")),
    "models only": study(humans=0, models=2, designs=DESIGNS),
    "humans only": study(humans=3, models=0, designs=DESIGNS),
    "mixed designs": study(humans=3, models=2, designs=DESIGNS, images=3),
}


def rows_of(spec: dict) -> list[dict]:
    """The response rows of a study specification (seeded, so one specification is one table)."""
    rng = np.random.default_rng(spec["seed"])
    categories = CATEGORIES[:spec["categories"]]
    observers = [(f"p{i}", "human") for i in range(spec["humans"])] + [(f"m{i}", "model") for i in range(spec["models"])]
    rows = []
    for (observer, kind), behaviour in zip(observers, spec["behaviours"]):
        def add(**fields):
            rows.append(_row(observer, kind, len(rows), **fields))

        cells = []
        if "suppression" in spec["designs"]:
            cells += [(c, lvl, p, None) for c, lvl, p in SUPPRESSION]
        if "cue_decomposition" in spec["designs"]:
            cells += [(c, lvl, p, None) for c, lvl, p in CUES]
        if "cue_conflict" in spec["designs"]:
            cells += [("cue_conflict", None, {}, "texture")]
        for condition, level, params, texture in cells:
            for i in range(spec["images"]):
                category = categories[i % len(categories)]
                texture_category = categories[(i + 1) % len(categories)] if texture else None
                add(trial_id=f"{category}{i}--{condition}--{level}", condition=condition, level=level, params=params,
                    category=category, texture_category=texture_category,
                    answer=_answer(behaviour, category, texture_category, categories, rng))
        if spec["practice"] and cells:
            add(trial_id="practice--1", condition="practice", level=None, params={}, category=categories[0],
                answer=_answer(behaviour, categories[0], None, categories, rng), role="practice")
            asked = categories[-1] if len(categories) > 1 else "not clear"
            add(trial_id="attention-001", condition="attention", level=None, params={}, category=categories[0],
                answer=asked if behaviour != "wrong" else categories[0], correct_answer=asked, role="attention")
        if spec["adaptive"] and "suppression" in spec["designs"]:
            for step, level in enumerate((1, 2, 0, 1)):
                category = categories[step % len(categories)]
                add(trial_id=f"{category}{step}--{ADAPTIVE_CONDITION}--{level}", condition=ADAPTIVE_CONDITION,
                    level=level, params=SUPPRESSION[1 + level][2], category=category,
                    answer=_answer(behaviour, category, None, categories, rng), session=f"adaptive:{ADAPTIVE_CONDITION}",
                    adaptive={"quest_threshold": 4.0 + step, "ci_low": 2.0, "ci_high": 7.5 + step, "trials": step + 1})
        if "oddity" in spec["designs"]:
            for t in range(spec["images"] + 1):
                right = behaviour == "right" or (behaviour == "random" and rng.random() < 0.5)
                add(trial_id=f"odd{t}", condition="dist" if t < spec["images"] else "catch", level=None, params={},
                    category=None, answer="" if behaviour == "timeout" else ("2" if right else "1"),
                    trial_type="oddity", correct_answer="2", role="catch" if t == spec["images"] else "test")
    return rows


def _answer(behaviour, category, texture_category, categories, rng) -> str:
    if behaviour == "timeout":
        return ""
    if behaviour == "right" or (behaviour == "random" and rng.random() < 0.5):
        return category
    if texture_category and rng.random() < 0.5:
        return texture_category
    others = [c for c in categories if c != category] or ["not clear"]
    return str(rng.choice(others))


def _row(observer, kind, index, *, trial_id, condition, level, params, category, answer, **extra):
    correct_answer = extra.pop("correct_answer", category)
    return {"experiment": "random", "observer": observer, "observer_kind": kind, "session": "1",
            "trial_index": index, "trial_id": trial_id, "role": "test", "trial_type": "classify",
            "condition": condition, "level": level, "params": params, "category": category, "response": answer,
            "correct_answer": correct_answer, "correct": None if answer == "" else int(answer == correct_answer),
            "timed_out": int(answer == ""), "rt_ms": None if kind == "model" or answer == "" else 600.0} | extra


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def check_report(root: Path, rows: list[dict], timeouts: str) -> dict:
    """Write the report of ``rows`` and check it: no NaN or infinity in the HTML or any table's CSV,
    JSON without non-finite constants, and every section shown with a table, a figure or a one-line note."""
    from analysis.exclusions import ExclusionOptions

    with ResponseStore(root / "responses.sqlite") as store:
        store.write_many(rows)
    options = AnalysisOptions(exclusions=ExclusionOptions(timeouts=timeouts), n_boot=30)
    html = write_report([root / "responses.sqlite"], root / "report", options=options, progress=False)
    text = re.sub(r'src="data:[^"]*"', "", html.read_text())
    assert not NONE_OR_NAN.search(text), NONE_OR_NAN.search(text)
    for table in (root / "report" / "tables").glob("*.csv"):
        assert not NONE_OR_NAN.search(table.read_text()), (table.name, NONE_OR_NAN.search(table.read_text()))
    results = json.loads((root / "report" / "results.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert all(math.isfinite(v) for v in _numbers(results))
    for note in results["notes"]:
        assert "\n" not in note
    blocks = dict(SECTION_BLOCK.findall(text))
    for name in results["sections"]:
        body = blocks[name]
        assert "<table" in body or "<img" in body or 'class="note"' in body or 'class="methods"' in body, name
        if name in results["missing"]:
            assert html_escape(results["missing"][name], quote=False) in body  # the line on what is missing
    for figure in (root / "report" / "figures").glob("*.png"):
        assert {p.suffix for p in figure.parent.glob(figure.stem + ".*")} == {".png", ".svg", ".pdf"}
    return results


CHECKED: dict[tuple[str, str], dict] = {}


def checked_report(tmp_path_factory, spec: dict, timeouts: str) -> dict:
    """:func:`check_report` of a study, run once per specification and exclusion rule: the named cases the
    tests below look at more closely are also ``@example`` cases, and one report is the same table checked."""
    key = (json.dumps(spec, sort_keys=True), timeouts)
    if key not in CHECKED:
        CHECKED[key] = check_report(tmp_path_factory.mktemp("report"), rows_of(spec), timeouts)
    return CHECKED[key]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(spec=studies(), timeouts=st.sampled_from(("exclude", "error")))
@example(spec=NAMED["one person"], timeouts="exclude")
@example(spec=NAMED["one trial per level"], timeouts="exclude")
@example(spec=NAMED["all wrong"], timeouts="error")
@example(spec=NAMED["all timeouts"], timeouts="exclude")
@example(spec=NAMED["all timeouts"], timeouts="error")
@example(spec=NAMED["one class only"], timeouts="exclude")
@example(spec=NAMED["models only"], timeouts="exclude")
@example(spec=NAMED["humans only"], timeouts="exclude")
@example(spec=NAMED["mixed designs"], timeouts="error")
def test_every_response_table_gives_a_report_of_finite_numbers(spec, timeouts, tmp_path_factory):
    checked_report(tmp_path_factory, spec, timeouts)


def test_all_timeouts_keep_their_sections_with_a_note(tmp_path_factory):
    """A study whose every answer timed out still shows the sections of its design, each saying why it
    has no numbers (a section is chosen by the design, before the exclusions)."""
    results = checked_report(tmp_path_factory, NAMED["all timeouts"], "exclude")
    assert {"reliance", "thresholds", "adaptive"} <= set(results["sections"])
    assert "timeout" in results["missing"]["reliance"]


def test_all_wrong_pilot_has_no_infinite_ratio(tmp_path_factory):
    """Everyone wrong on the originals: relative accuracy A/0 and the chance-corrected ratio are empty with a
    note (they once printed inf)."""
    results = checked_report(tmp_path_factory, NAMED["all wrong"], "error")
    rel = results["tables"]["relative_accuracy"]
    assert rel and all(r["relative_accuracy"] is None and r["chance_corrected"] is None for r in rel)
    assert {r["note"] for r in rel} == {"baseline accuracy 0: no relative or chance-corrected accuracy"}
    assert "no relative or chance-corrected accuracy" in results["missing"]["reliance"]
