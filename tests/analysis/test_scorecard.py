"""Scorecard entries: ranked and compared with people only on the references' own image list and rule, the
published sets' image-list hashes as the shared folders list them, the rank by hand, and S_cd over a model set."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from analysis import scorecard
from analysis.benchmarks import BENCHMARKS
from analysis.benchmarks.cue_conflict import CueConflict
from analysis.benchmarks.cue_decomposition import CueDecomposition


def listing_hash(names) -> str:
    """The image-list hash computed here from its definition (sorted distinct names, one per line)."""
    return hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()


def test_published_sets_hash_as_the_shared_folders_list_them(shared):
    stimuli = shared / "data" / "geirhos2019" / "stimuli"
    listings = {"cue-conflict": [p.stem for p in (stimuli / "cue-conflict").glob("*/*")],
                "edges": [p.stem for p in (stimuli / "edges").glob("*/*")],
                "silhouettes": [p.stem for p in (stimuli / "silhouettes").glob("*/*")],
                "dist": [p.stem for p in (shared / "data" / "dist" / "original").iterdir()]}
    for name, names in listings.items():
        published = BENCHMARKS[name]().published_set
        assert (published.images, published.image_list_hash) == (len(names), listing_hash(names)), name


def conflict_trials(names, rule="16class-mean", shape_every=4):
    """One cue-conflict trial per name; every ``shape_every``-th answer names the shape, the rest the texture."""
    return pd.DataFrame({"source_image": names, "trial_id": names, "condition": "cue-conflict", "params": [{}] * len(names),
                         "category": "cat", "texture_category": "dog", "decision_rule": rule,
                         "response": ["cat" if i % shape_every == 0 else "dog" for i in range(len(names))],
                         "correct": [int(i % shape_every == 0) for i in range(len(names))]})


@pytest.fixture(scope="module")
def geirhos_names(shared):
    return sorted(p.stem for p in (shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict").glob("*/*"))


def test_only_the_published_image_list_with_the_published_rule_is_ranked(geirhos_names):
    bench = CueConflict()
    full = scorecard.score(bench, conflict_trials(geirhos_names))[0]
    assert full["comparable"] and full["rank"] is not None and full["human"] == 0.958
    assert full["value"] == pytest.approx(320 / 1280) and full["images"] == {"shape decisions": 1280}
    assert all("Not ranked" not in n for n in full["notes"])

    subset = scorecard.score(bench, conflict_trials(geirhos_names[::40]))[0]   # what --per-class takes: a subset
    assert subset["rank"] is None and subset["human"] is None and len(subset["notes"]) == 1
    assert subset["notes"][0].startswith("Not ranked or compared with people: this run scored 32 images (image list ")
    assert "not the 1,280 images of Geirhos et al. 2019's cue-conflict set" in subset["notes"][0]

    other_rule = scorecard.score(bench, conflict_trials(geirhos_names, rule="16class-sum"))[0]
    assert other_rule["rank"] is None and other_rule["notes"] == [
        "Not ranked or compared with people: the model answered with the decision rule 16class-sum, and the "
        "references used 16class-mean."]


@pytest.mark.shared
@pytest.mark.validates("scorecard shape bias over source images",
                       definition="per source image the shape decisions among its shape and texture decisions, over "
                                  "images whose shape and texture classes differ; answers naming neither class count "
                                  "for neither",
                       source="Geirhos et al. 2019, Sec. 3 and Fig. 4",
                       reference="published values from the released raw data: AlexNet 0.429, GoogLeNet 0.312, "
                                 "VGG-16 0.172 (the trials as released, loaded with analysis.load)",
                       tolerance="3 decimals")
def test_scorecard_shape_bias_of_the_released_model_answers_is_the_published_value(shared):
    """The cue-conflict plug-in's own cell (one decision per image), fed the released trials of the three CNNs,
    gives their published shape bias; with no decision rule recorded the answers are not ranked."""
    from analysis.exclusions import apply_exclusions
    from analysis.load import load_responses

    trials = apply_exclusions(load_responses(shared / "data/geirhos2019/raw-data/cue-conflict")).scored
    for model, published in {"alexnet": 0.429, "googlenet": 0.312, "vgg": 0.172}.items():
        (entry,) = scorecard.score(CueConflict(), trials[trials["observer"] == model])
        assert round(entry["value"], 3) == published, model
        assert entry["ci_low"] < entry["value"] < entry["ci_high"] and entry["rank"] is None
        assert "decision rule unknown" in entry["notes"][0]


@pytest.mark.validates("scorecard place among published models and the too-small-to-rank note",
                       definition="rank = 1 + published models above the score; the interval's ends give the rank "
                                  "range; a range wider than 2 ranks is 'too small to rank'",
                       source="this project (issues 40, 49)", reference="hand count over five published values",
                       tolerance="exact")
def test_rank_rank_range_and_notes_by_hand():
    models = (("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5))
    assert scorecard.rank(0.75, models) == 3 and scorecard.rank(0.95, models) == 1 and scorecard.rank(0.1, models) == 6
    entry = {"value": 0.75, "ci_low": 0.55, "ci_high": 0.95, "human": 0.96, "human_range": None, "comparable": True,
             "not_ranked_because": None, "rank_range": [1, 5], "images": {"all": 40}, "published_models": 5}
    assert scorecard.notes(entry) == ["too small to rank: with 40 images per setting the 95 % interval spans ranks "
                                      "1-5 of 6"]
    above = {**entry, "ci_low": 0.97, "value": 0.98, "ci_high": 0.99, "human_range": (0.91, 0.96), "rank_range": [1, 1]}
    assert "above the range of the individual people (0.91-0.96)" in scorecard.notes(above)[0]
    # above the people's mean but inside their individual range (Geirhos et al.'s ten: 0.919-0.987): no claim
    assert scorecard.notes({**above, "human_range": (0.919, 0.987)}) == []
    elsewhere = {**above, "comparable": False, "not_ranked_because": "Not ranked: why."}
    assert scorecard.notes(elsewhere) == ["Not ranked: why."]


def cue_trials(observer: str, accuracies: dict[str, float], n: int = 1000) -> pd.DataFrame:
    """n trials per cue condition, the first round(p n) of them correct."""
    conditions = np.repeat(list(accuracies), n)
    index = np.tile(np.arange(n), len(accuracies))
    correct = index < np.repeat([round(p * n) for p in accuracies.values()], n)
    return pd.DataFrame({"observer": observer, "observer_kind": "model", "condition": conditions,
                         "source_image": [f"img{i}" for i in index], "trial_id": [f"{c}-{i}" for c, i in zip(conditions, index)],
                         "params": [{}] * len(index), "decision_rule": "16class-mean", "correct": correct.astype(int)})


@pytest.mark.validates("scorecard S_cd over the models evaluated on the same stimuli, and R_cd",
                       definition="S_cd = (Q_S/s)/(Q_S/s + Q_T/t), s and t the mean Q_S, Q_T of the models that "
                                  "answered the same stimuli; with one model no S_cd (it is 0.5 by construction); "
                                  "R_cd = (Q_S + Q_T) / (2 Q_O)",
                       source="Heinert et al., eqs. 3-5, Table VIII",
                       reference="published S_cd (0.563) and R_cd (0.907) of ConvNeXt L with Heinert et al.'s 43 "
                                 "models as the set",
                       tolerance="0.005 (S_cd), 0.001 (R_cd) (inputs rounded to 3 decimals)")
def test_cue_decomposition_score_over_the_model_set_gives_the_published_value():
    from analysis.reference import load

    table8 = load("heinert_table8").query("arch != 'trained'")
    everyone = pd.concat([cue_trials(row.model, {"original": row.q_o, "shape_cue": row.q_s, "texture_cue": row.q_t})
                          for row in table8.itertuples()], ignore_index=True)
    convnext = everyone[everyone["observer"] == "ConvNeXt L"]
    s_cd, r_cd = scorecard.score(CueDecomposition(), convnext, everyone)
    assert s_cd["value"] == pytest.approx(0.563, abs=0.005) and r_cd["value"] == pytest.approx(0.907, abs=0.001)
    assert f"the {len(table8)} models" in s_cd["description"] and s_cd["rank"] is None
    assert s_cd["ci_low"] < s_cd["value"] < s_cd["ci_high"]
    alone = scorecard.score(CueDecomposition(), convnext)[0]
    assert alone["value"] is None or np.isnan(alone["value"])
    assert "only one model answered these" in alone["notes"][1]


def test_the_documented_plugin_is_listed_scored_and_refused_without_its_data(tmp_path):
    """docs/benchmark.md's one-file benchmark, installed beside cuebench by its entry point only."""
    import os
    import subprocess
    import sys

    from conftest import REPO
    from support import plugin_package

    page = (REPO / "docs" / "benchmark.md").read_text(encoding="utf-8")
    code = page.split("### A benchmark is a plug-in", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    package = plugin_package(tmp_path / "pkg", "cuebench-sketches", {"cuebench.benchmarks": {"sketches": "sketches:Sketches"}},
                             {"sketches.py": code})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))}
    script = """
import pandas as pd
from analysis.benchmarks import BENCHMARKS
from analysis.scorecard import score
from cuebench_app.cli import main

main(["list", "benchmarks"])
print("refused with", main(["benchmark", "tf_efficientnet_lite0", "--benchmarks", "sketches", "--shared", "empty"]))
trials = pd.DataFrame({"source_image": ["a", "b"], "trial_id": ["a", "b"], "condition": "original",
                       "params": [{}, {}], "decision_rule": "16class-mean", "correct": [1, 0]})
entry = score(BENCHMARKS["sketches"](), trials)[0]
print(entry["value"], entry["notes"][0])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split() == ["sketches", "Accuracy", "on", "my", "800", "sketches."] for line in lines)
    assert "refused with 2" in lines and "benchmark sketches needs" in done.stderr and "data/sketches" in done.stderr
    # the example declares its image set but no published values: nothing to rank against or compare with
    assert lines[-1] == "0.5 Not ranked or compared with people: no published values were measured this way."


def test_a_ratio_over_no_correct_originals_has_no_score_and_the_scorecard_stays_json(tmp_path):
    """3 of 8 right under suppression over 0 of 8 on the originals: A_sup / A_orig is undefined (3/8 / 0), so the
    entry has no value and no interval (not 'inf [0.52, inf]' beside 'no score'), and the scorecard file is
    strict JSON (no Infinity), as a browser's JSON.parse needs."""
    import json

    from analysis.benchmarks.suppression import Suppression
    from cuebench_app.benchmark import scorecard as make_card
    from cuebench_app.benchmark import write_scorecard

    bench = Suppression()
    metric = bench.metrics(pd.DataFrame())[0]
    entry = scorecard.entry(bench, metric, [(0.0, 8), (3.0, 8)], {f"p{i}" for i in range(8)}, ["16class-burgert"])
    assert all(np.isnan(entry[k]) for k in ("value", "ci_low", "ci_high")) and entry["rank"] is None
    assert entry["notes"][0] == "no score: the benchmark's trials do not define this metric for the model."
    card = make_card("m", {"benchmarks": ["suppression"], "per_class": None, "eed_steps": None, "device": "cpu"},
                     [entry], [])
    text = write_scorecard(tmp_path, card).read_text()

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    (written,) = json.loads(text, parse_constant=refuse)["metrics"]
    assert (written["value"], written["ci_low"], written["ci_high"]) == (None, None, None)
    assert "| – [–, –] |" in (tmp_path / "m.md").read_text()
