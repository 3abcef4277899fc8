"""The model-vs-human export is lossless: analysing cuebench's own export gives the same numbers as
analysing the experiment, for every registered design.

Each design builds a tiny real experiment (a few photos, few EED or synthesis steps, subsets of the
published Geirhos et al. and DiST sets); three people and two models answer every trial of it,
practice, catch and attention trials included, by a seeded simulated observer (right with its own
probability, else the texture class of a cue-conflict image or another choice; people sometimes time
out). The photos' two classes are spelled with a space, an underscore, a hyphen, a dot and a digit,
and the cue-conflict-eed experiment pairs every shape photo with two texture photos of one class.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.load import load_responses
from analysis.report import AnalysisOptions, analyze
from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.export import export_mvh
from cuebench.responses import ResponseStore, trial_row
from stimuli.designs import DESIGNS
from support import check_photo_folder, dist_subset

CLASSES = {"tabby cat": ("chelsea", "coffee", "rocket"), "T-rex_2.0": ("motorcycle", "astronaut", "camera")}
GEIRHOS_CLASSES = ("airplane", "bear", "bicycle")
DIST_TRIPLETS = 4
BUILDS = {
    "suppression": ["--grid", "human", "--practice", "1", "--catch-every", "2", "--attention", "3", "--check-images", "CHECKS"],
    "corruptions": ["--corruptions", "contrast,high_pass"],
    "cue-decomposition": ["--eed-steps", "2", "--attention", "4"],
    "cue-conflict-eed": ["--eed-steps", "2", "--conflict-textures", "2"],
    "dist": ["--synthesis-steps", "1", "--synthesis-device", "cpu", "--practice", "1", "--catch-every", "6",
             "--attention", "6", "--check-images", "CHECKS"],
    "cue-conflict-import": [],
    "dist-import": [],
    "labelled-set": ["--practice", "1", "--catch-every", "2", "--attention", "3", "--check-images", "CHECKS"],
    "diagvib": ["--diagvib-digits", "sklearn-digits", "--sizes", "90,18,60", "--diagvib-human-trials", "6",
                "--study", "ZGO", "--target", "shape", "--correlated", "hue", "--dataset-sample", "0"],
}
CHECKS = "CHECKS"
"""Stands in a build's arguments for a --check-images folder of the photos' classes (mirrored copies)."""
SLOW = {"cue-decomposition", "cue-conflict-eed", "dist"}
SHARED = {"cue-conflict-import", "dist-import"}
OBSERVERS = (("p1", "human", 0.8), ("p2", "human", 0.7), ("p3", "human", 0.9), ("resnet-a", "model", 0.6),
             ("vit_b", "model", 0.5))
FAILS_ATTENTION = "p1"
NOT_CARRIED = {"imagename", "params", "methods"}
"""What the raw format cannot hold the same way: the stimulus file's name (the export names it the
model-vs-human way), the parameters' JSON spelling (the values are the same, :func:`params_equal`),
and the methods paragraph (timing and devices have no raw column)."""


MODEL_ONLY_DESIGNS = {"seg-cue-decomposition"}
"""Designs whose answers the raw format cannot hold (per-image confusion matrices of segmentation): their build,
evaluation and report run from the documented commands in tests/model_eval/test_segmentation.py."""


def test_every_registered_design_is_covered():
    assert set(BUILDS) | MODEL_ONLY_DESIGNS == set(DESIGNS.names())


@pytest.fixture(scope="module")
def photos_by_class(photos, tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("photos")
    for cls, names in CLASSES.items():
        (root / cls).mkdir()
        for name in names:
            Image.fromarray(photos[name]).save(root / cls / f"{name}_1.png")
    return root


def images_for(design: str, photos_by_class: Path, tmp: Path) -> list[str]:
    """The ``--images`` of a design's build: the shared sets' subsets for the importers, else the photos."""
    if design not in SHARED and design != "diagvib":
        return ["--images", str(photos_by_class)]
    if design == "diagvib":
        return []
    from conftest import shared_root, unavailable

    shared = shared_root()
    if shared is None:
        unavailable("../shared (or CUEBENCH_SHARED) is missing: the published data sets are not available")
    subset = tmp / "images"
    if design == "cue-conflict-import":
        source = shared / "data/geirhos2019/stimuli/cue-conflict"
        for cls in GEIRHOS_CLASSES:
            (subset / cls).mkdir(parents=True)
            for f in sorted((source / cls).glob("*.png"))[:4]:
                shutil.copy(f, subset / cls / f.name)
    else:
        dist_subset(shared / "data/dist", subset, DIST_TRIPLETS)
    return ["--images", str(subset)]


def simulated_answers(experiment, seed: int = 3) -> list[dict]:
    """Every observer of :data:`OBSERVERS` answers every trial: right with its probability, else (on a
    cue-conflict image, half the time) the texture class, else another choice; a person times out on
    one trial in twenty; everyone but :data:`FAILS_ATTENTION` passes the attention checks."""
    rng = np.random.default_rng(seed)
    rows = []
    for observer, kind, p_right in OBSERVERS:
        for index, trial in enumerate(experiment.trials):
            others = [c for c in trial.choices if c != trial.correct]
            if trial.role == "attention":
                answer, rt = (others[0] if observer == FAILS_ATTENTION else trial.correct), 900.0
            elif kind == "human" and rng.random() < 0.05:
                answer, rt = None, None
            elif rng.random() < p_right:
                answer, rt = trial.correct, float(rng.uniform(400, 1500))
            elif trial.texture_category and trial.texture_category != trial.category and rng.random() < 0.5:
                answer, rt = trial.texture_category, float(rng.uniform(400, 1500))
            else:
                answer, rt = str(rng.choice(others)), float(rng.uniform(400, 1500))
            rows.append(trial_row(experiment, trial, observer=observer, observer_kind=kind, session=1,
                                  trial_index=index, response=answer, rt_ms=rt if kind == "human" else None,
                                  timed_out=int(answer is None) if kind == "human" else None))
    return rows


@pytest.fixture(scope="module")
def answered(request, photos_by_class, tmp_path_factory):
    """(experiment directory, its export folder, the simulated rows) of one design."""
    design = request.param
    tmp = tmp_path_factory.mktemp(design)
    out = tmp / "experiment"
    options = [str(check_photo_folder(tmp / "checks", CLASSES)) if arg == CHECKS else arg for arg in BUILDS[design]]
    assert main(["stimuli", "build", "--design", design, "--out", str(out), "--workers", "1",
                 *images_for(design, photos_by_class, tmp), *options]) == 0
    expdir = ExperimentDir(out)
    rows = simulated_answers(expdir.load())
    with ResponseStore(expdir.responses_file) as store:
        store.write_many(rows)
    export_mvh(expdir, tmp / "mvh")
    return design, expdir, tmp / "mvh", rows


def design_marks(design: str):
    marks = [pytest.mark.slow] if design in SLOW else []
    return marks + ([pytest.mark.shared] if design in SHARED else [])


def params_equal(a: pd.Series, b: pd.Series) -> bool:
    from analysis.load import params_of

    return [params_of(x) for x in a] == [params_of(x) for x in b]


def sorted_table(table: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in table.columns if not pd.api.types.is_float_dtype(table[c])]
    return table.sort_values(keys).reset_index(drop=True) if keys else table


@pytest.mark.parametrize("answered", [pytest.param(d, marks=design_marks(d)) for d in sorted(BUILDS)],
                         indirect=True)
def test_reanalysing_the_export_gives_every_number_of_the_experiment(answered):
    design, expdir, mvh, rows = answered
    options = AnalysisOptions(n_choices=len(expdir.load().label_set.labels), n_boot=50)
    direct = analyze(load_responses(expdir.root), options)
    exported = analyze(load_responses(mvh), options)
    assert direct.sections == exported.sections and direct.missing == exported.missing
    assert {k: v for k, v in direct.summary.items() if k not in NOT_CARRIED} == \
        {k: v for k, v in exported.summary.items() if k not in NOT_CARRIED}
    assert set(direct.tables) == set(exported.tables)
    compared = []
    for name in sorted(set(direct.tables) - NOT_CARRIED):
        a, b = sorted_table(direct.tables[name]), sorted_table(exported.tables[name])
        columns = [c for c in a.columns if c not in NOT_CARRIED]
        pd.testing.assert_frame_equal(a[columns], b[columns], check_dtype=False, obj=f"table {name}")
        if "params" in a.columns:
            assert params_equal(a["params"], b["params"])
        compared.append(name)
    assert {"accuracy", "group_accuracy", "error_consistency", "observer_summary"} <= set(compared)
    # the human grid has at most two levels per condition: too few for a threshold (the thresholds section says so)
    expected = {"suppression": {"relative_accuracy", "noise_ceilings", "ttests"},
                "corruptions": {"thresholds", "noise_ceilings"},
                "cue-decomposition": {"cue_decomposition"},
                "cue-conflict-eed": {"shape_bias", "shape_bias_by_category"},
                "cue-conflict-import": {"shape_bias"},
                "dist": {"oddity"}, "dist-import": {"oddity"}, "diagvib": {"noise_ceilings"},
                "labelled-set": {"noise_ceilings"}}[design]
    assert expected <= set(compared)


@pytest.mark.parametrize("answered", [pytest.param(d, marks=design_marks(d)) for d in sorted(BUILDS)],
                         indirect=True)
def test_every_row_comes_back_with_its_role_and_identity(answered):
    design, expdir, mvh, rows = answered
    back = load_responses(mvh).sort_values(["observer", "trial_index"]).reset_index(drop=True)
    stored = load_responses(expdir.root).sort_values(["observer", "trial_index"]).reset_index(drop=True)
    assert len(back) == len(rows)
    for column in ("observer", "observer_kind", "trial_id", "role", "trial_type", "condition", "level", "category",
                   "texture_category", "source_image", "response", "correct_answer", "correct"):
        pd.testing.assert_series_equal(back[column], stored[column], check_dtype=False, obj=column)
    assert back["timed_out"].tolist() == stored["timed_out"].fillna(0).tolist()  # a model's empty is no timeout
    assert params_equal(back["params"], stored["params"])
    assert back["experiment"].unique().tolist() == [expdir.load().name]
    if design in ("dist", "suppression"):
        assert {"test", "practice", "catch", "attention"} <= set(back["role"])


def exported_names(mvh: Path) -> dict[str, list[str]]:
    names = {}
    for path in sorted(mvh.glob("*.csv")):
        with path.open(newline="") as fh:
            names[path.name] = [r["imagename"] for r in csv.DictReader(fh)]
    return names


@pytest.mark.parametrize("answered", [pytest.param(d, marks=design_marks(d)) for d in sorted(BUILDS)],
                         indirect=True)
def test_image_names_are_unique_and_the_same_image_has_the_same_name(answered):
    design, expdir, mvh, rows = answered
    names = exported_names(mvh)
    without_observer = set()
    for listed in names.values():
        assert len(set(listed)) == len(listed)
        without_observer.add(tuple(sorted(n.split("_", 2)[2] for n in listed)))
    assert len(without_observer) == 1  # every observer's file names the same images


def model_vs_human_texture(imagename: str) -> str:
    """model-vs-human's own parser (plotting/analyses.py, ShapeBias.get_texture_category): the last ``_``
    token, up to its first ``.``, its last ``-`` token, digits removed."""
    last = imagename.split("_")[-1].split(".")[0].split("-")[-1]
    return "".join(ch for ch in last if not ch.isdigit())


@pytest.mark.slow
@pytest.mark.parametrize("answered", ["cue-conflict-eed"], indirect=True)
def test_cue_conflict_eed_names_and_shape_bias_by_hand(answered):
    design, expdir, mvh, rows = answered
    trials = expdir.load().trials
    shape_photo_class = {(t.source_image, t.texture_category) for t in trials if t.role == "test"}
    assert len(shape_photo_class) < sum(t.role == "test" for t in trials)  # one shape photo, two textures of a class
    conflict = [r for r in rows if r["role"] == "test" and r["response"]]  # timeouts are excluded
    by_hand = {}
    for observer in [o for o, _, _ in OBSERVERS if o != FAILS_ATTENTION]:
        mine = [r for r in conflict if r["observer"] == observer]
        shape = sum(r["response"] == r["category"] for r in mine)
        texture = sum(r["response"] == r["texture_category"] for r in mine)
        by_hand[observer] = shape / (shape + texture)
    exported = analyze(load_responses(mvh), AnalysisOptions(n_choices=2, n_boot=20), only={"shape-bias"})
    assert exported.tables["shape_bias"].set_index("observer")["shape_bias"].to_dict() == pytest.approx(by_hand)
    back = load_responses(mvh)
    assert set(back["texture_category"].dropna()) == set(CLASSES)
    # model-vs-human's parser reads the class spelled in letters and spaces; digits and punctuation
    # it cannot hold (it strips digits and cuts at '.'), which cuebench's reader decodes exactly
    names = [n for listed in exported_names(mvh).values() for n in listed]
    assert {model_vs_human_texture(n) for n in names if n.endswith("-tabby cat.png")} == {"tabby cat"}


def test_geirhos_names_keep_their_published_reading(tmp_path):
    """A name that cuebench did not write is read the model-vs-human way (digits removed)."""
    raw = tmp_path / "cue-conflict"
    raw.mkdir()
    (raw / "cue-conflict_subject-01_session_1.csv").write_text(
        "subj,session,trial,rt,object_response,category,condition,imagename\n"
        "subject-01,1,1,0.8,bicycle,airplane,0,0001_cc_s01_0_airplane_00_airplane1-bicycle2.png\n")
    back = load_responses(raw)
    assert back.loc[0, "texture_category"] == "bicycle" and back.loc[0, "source_image"] == "airplane1-bicycle2"
    assert back.loc[0, "role"] == "test" and back.loc[0, "condition"] == "cue-conflict"


def test_diagvib_conditions_with_colons_come_back(tmp_path):
    """DiagViB conditions are ``<study>:<target>-<correlated>``: the reserved ``:`` is percent-encoded."""
    from cuebench.export import mvh_condition
    from analysis.load import decode_condition

    row = {"condition": "ZGO:shape-hue", "level": None, "params": {"split": "test", "note": "a,b=c"},
           "trial_type": "classify", "role": "catch"}
    assert mvh_condition(row) == 'catch@ZGO%3Ashape-hue::note="a,b=c",split="test"'
    assert decode_condition(mvh_condition(row)) == ("ZGO:shape-hue", None, {"note": "a,b=c", "split": "test"},
                                                    "classify", "catch")
