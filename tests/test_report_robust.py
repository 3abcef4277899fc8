"""The report on any data: response tables of random size and shape (one person, one trial per level,
all wrong, all timeouts, one class only, models only, humans only, mixed designs) always give a report
whose every number is finite or explicitly empty, and whose sections say what is missing."""

from __future__ import annotations

import json
import re
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.report import AnalysisOptions, write_report
from cuebench.responses import ResponseStore

CATEGORIES = ("boat", "car", "cat", "dog")
DESIGNS = ("suppression", "cue_conflict", "oddity", "cue_decomposition")
SUPPRESSION = [("original", None, {}), ("patch_shuffle", 0, {"grid": 2}), ("patch_shuffle", 1, {"grid": 4}),
               ("patch_shuffle", 2, {"grid": 8}), ("blur", 0, {"sigma": 1.0}), ("blur", 1, {"sigma": 2.0})]
CUES = [("original", None, {}), ("shape_cue", None, {}), ("texture_cue", None, {})]


@st.composite
def response_tables(draw):
    """Rows of a random study: observers of either kind (at least one), a mix of designs, a few images
    per cell, an answer behaviour per observer (always right, always wrong, random, never answers)."""
    humans = draw(st.integers(0, 3))
    models = draw(st.integers(0 if humans else 1, 2))
    designs = draw(st.sets(st.sampled_from(DESIGNS), min_size=1, max_size=len(DESIGNS)))
    n_categories = draw(st.integers(1, len(CATEGORIES)))
    images = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    categories = CATEGORIES[:n_categories]
    observers = [(f"p{i}", "human") for i in range(humans)] + [(f"m{i}", "model") for i in range(models)]
    rows = []
    for observer, kind in observers:
        behaviour = draw(st.sampled_from(("right", "wrong", "random", "timeout")))
        cells = []
        if "suppression" in designs:
            cells += [(c, lvl, p, None) for c, lvl, p in SUPPRESSION]
        if "cue_decomposition" in designs:
            cells += [(c, lvl, p, None) for c, lvl, p in CUES]
        if "cue_conflict" in designs:
            cells += [("cue_conflict", None, {}, "texture")]
        for condition, level, params, texture in cells:
            for i in range(images):
                category = categories[i % n_categories]
                texture_category = categories[(i + 1) % n_categories] if texture else None
                answer = _answer(behaviour, category, texture_category, categories, rng)
                rows.append(_row(observer, kind, len(rows), f"{category}{i}--{condition}--{level}", condition, level,
                                 params, category, answer, texture_category=texture_category))
        if "oddity" in designs:
            for t in range(images + 1):
                right = behaviour == "right" or (behaviour == "random" and rng.random() < 0.5)
                answer = "" if behaviour == "timeout" else ("2" if right else "1")
                rows.append(_row(observer, kind, len(rows), f"odd{t}", "dist", None, {}, None, answer,
                                 trial_type="oddity", correct_answer="2", role="catch" if t == images else "test"))
    return rows


def _answer(behaviour, category, texture_category, categories, rng) -> str:
    if behaviour == "timeout":
        return ""
    if behaviour == "right" or (behaviour == "random" and rng.random() < 0.5):
        return category
    if texture_category and rng.random() < 0.5:
        return texture_category
    others = [c for c in categories if c != category] or ["not_clear"]
    return str(rng.choice(others))


def _row(observer, kind, index, trial_id, condition, level, params, category, answer, **extra):
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


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(rows=response_tables(), timeouts=st.sampled_from(("exclude", "error")))
def test_every_response_table_gives_a_report_of_finite_numbers(rows, timeouts, tmp_path_factory):
    from analysis.exclusions import ExclusionOptions

    root = tmp_path_factory.mktemp("random")
    with ResponseStore(root / "responses.sqlite") as store:
        store.write_many(rows)
    options = AnalysisOptions(exclusions=ExclusionOptions(timeouts=timeouts), n_boot=30)
    html = write_report([root / "responses.sqlite"], root / "report", options=options, progress=False)
    text = html.read_text()
    assert not re.search(r"\bnan\b", re.sub(r'src="data:[^"]*"', "", text), re.IGNORECASE)
    results = json.loads((root / "report" / "results.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert all(math.isfinite(v) for v in _numbers(results))
    for note in results["notes"]:
        assert "\n" not in note
