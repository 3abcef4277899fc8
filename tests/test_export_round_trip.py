"""The model-vs-human export is lossless: analysing cuebench's own export gives the same numbers as
analysing the experiment, for every design that has responses to export: suppression, cue
conflict, cue decomposition and DiST oddity triplets (DiagViB studies are training studies whose
models answer the same suppression-style trials; their tables are checked in test_diagvib_studies)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.exclusions import apply_exclusions
from analysis.load import load_responses, params_of
from analysis.report import AnalysisOptions, analyze
from cuebench.expdir import ExperimentDir
from cuebench.export import export_mvh
from cuebench.responses import ResponseStore

CLASSES = ("bird", "boat", "cat", "dog")
DESIGNS = {
    "suppression": [("original", None, {}, None), ("patch_shuffle", 0, {"grid": 2}, None),
                    ("patch_shuffle", 4, {"grid": 6}, None), ("bilateral", 4, {"d": 12, "sigma_color": 170}, None),
                    ("grayscale", 4, {"alpha": 1.0}, None)],
    "cue-conflict": [("cue_conflict", None, {}, "texture")],
    "cue-decomposition": [("original", None, {}, None), ("shape_cue", None, {}, None),
                          ("texture_cue", None, {}, None)],
    "dist": [("dist", None, {}, None)],
}
ODDITY_POSITIONS = ("1", "2", "3")


def responses(design: str, seed: int = 1) -> list[dict]:
    """Two people and two models answering every cell of the design on 8 images, at random but seeded;
    cue-conflict answers name the shape, the texture or another class."""
    rng = np.random.default_rng(seed)
    rows = []
    for observer, kind in (("p1", "human"), ("p2", "human"), ("resnet-a", "model"), ("vit_b", "model")):
        for condition, level, params, texture in DESIGNS[design]:
            for i in range(8):
                shape = CLASSES[i % 4]
                texture_class = CLASSES[(i + 1 + i // 4) % 4] if texture else None
                oddity = design == "dist"
                truth = ODDITY_POSITIONS[i % 3] if oddity else shape
                answer = str(rng.choice(ODDITY_POSITIONS if oddity else [shape, texture_class or shape,
                                                                          CLASSES[(i + 2) % 4]]))
                rows.append({"experiment": f"{design}-study", "observer": observer, "observer_kind": kind,
                             "session": "1", "trial_index": len(rows), "trial_id": f"{shape}{i}--{condition}--{level}",
                             "role": "test", "trial_type": "oddity" if oddity else "classify",
                             "condition": condition, "level": level, "params": params,
                             "category": f"great {shape}" if oddity else shape, "texture_category": texture_class,
                             "source_image": f"{shape}_{i}", "response": answer, "correct_answer": truth,
                             "correct": int(answer == truth), "rt_ms": 640.0 if kind == "human" else None})
    return rows


@pytest.mark.parametrize("design", sorted(DESIGNS))
def test_reanalysing_the_export_gives_the_same_numbers(design, tmp_path):
    expdir = tmp_path / "experiment"
    expdir.mkdir()
    with ResponseStore(expdir / "responses.sqlite") as store:
        store.write_many(responses(design))
    export_mvh(ExperimentDir(expdir), tmp_path / "mvh")
    options = AnalysisOptions(n_choices=4, n_boot=20)
    only = {"accuracy", "reliance", "shape-bias", "cue-decomposition", "consistency", "oddity"}
    direct = analyze(load_responses(expdir), options, only=only)
    exported = analyze(load_responses(tmp_path / "mvh"), options, only=only)
    assert direct.sections == exported.sections
    key = ["observer", "condition", "level"]
    for name in ("accuracy", "relative_accuracy", "shape_bias", "cue_decomposition", "error_consistency", "oddity"):
        if name not in direct.tables:
            continue
        a, b = direct.tables[name], exported.tables[name]
        cols = [c for c in key + ["observer_a", "observer_b"] if c in a.columns]
        a, b = a.sort_values(cols).reset_index(drop=True), b.sort_values(cols).reset_index(drop=True)
        numbers = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c])]
        pd.testing.assert_frame_equal(a[cols + numbers], b[cols + numbers], check_dtype=False)
    if design == "dist":
        oddity = direct.tables["oddity"].set_index("observer")
        by_hand = {o: sum(r["correct"] for r in responses(design) if r["observer"] == o) / 8 for o in oddity.index}
        assert oddity["accuracy"].to_dict() == pytest.approx(by_hand)
        back = load_responses(tmp_path / "mvh")
        assert set(back["trial_type"]) == {"oddity"} and set(back["category"]) == {f"great {c}" for c in CLASSES}
    if design == "cue-conflict":
        shape_bias = direct.tables["shape_bias"]["shape_bias"]
        assert shape_bias.between(0.05, 0.95).all()  # the export once lost the texture class: every bias read 1.0
    if design == "suppression":
        scored = apply_exclusions(load_responses(tmp_path / "mvh")).scored
        grids = scored[scored["condition"] == "patch_shuffle"].drop_duplicates("level").set_index("level")["params"]
        assert {level: params_of(p) for level, p in grids.items()} == {0: {"grid": 2}, 4: {"grid": 6}}
