"""Scorecard entries: ranked and compared with people only among the published sources measured as the run was
(their image list and rule), the others shown apart for context; the sources' image-list hashes as the shared
folders list them, the rank by hand, and S_cd over a model set."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from analysis import scorecard
from analysis.benchmarks import BENCHMARKS
from analysis.benchmarks.cue_conflict import CueConflict
from analysis.benchmarks.cue_decomposition import CueDecomposition
from cuebench_app.benchmark import card_markdown


def listing_hash(names) -> str:
    """The image-list hash computed here from its definition (sorted distinct names, one per line)."""
    return hashlib.sha256("\n".join(sorted(set(names))).encode()).hexdigest()


def test_published_sets_hash_as_the_shared_folders_list_them(shared):
    """Each benchmark's ranking reference (its first source) measured the shared folder's images; DiST's models
    were measured on the 2,400 triplets of Wen et al.'s release, of which the shared folder holds 400."""
    stimuli = shared / "data" / "geirhos2019" / "stimuli"
    listings = {"cue-conflict": [p.stem for p in (stimuli / "cue-conflict").glob("*/*")],
                "edges": [p.stem for p in (stimuli / "edges").glob("*/*")],
                "silhouettes": [p.stem for p in (stimuli / "silhouettes").glob("*/*")]}
    for name, names in listings.items():
        measured = BENCHMARKS[name]().metrics(pd.DataFrame())[0].published()[0].measured_on
        assert (measured.images, measured.image_list_hash) == (len(names), listing_hash(names)), name
    dist = [p.stem for p in (shared / "data" / "dist" / "original").iterdir()]
    measured = BENCHMARKS["dist"]().metrics(pd.DataFrame())[0].published()[0].measured_on
    assert len(dist) == 400 and measured.images == 2400 and measured.image_list_hash != listing_hash(dist)


def conflict_trials(names, rule="16class-mean", shape_every=4):
    """One cue-conflict trial per name; every ``shape_every``-th answer names the shape, the rest the texture."""
    return pd.DataFrame({"source_image": names, "trial_id": names, "condition": "cue-conflict", "params": [{}] * len(names),
                         "category": "cat", "texture_category": "dog", "decision_rule": rule,
                         "response": ["cat" if i % shape_every == 0 else "dog" for i in range(len(names))],
                         "correct": [int(i % shape_every == 0) for i in range(len(names))]})


@pytest.fixture(scope="module")
def geirhos_names(shared):
    return sorted(p.stem for p in (shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict").glob("*/*"))


HEINERT_CONTEXT = ("Heinert et al. 2024, Table VIII (appendix): 43 models (0.105-0.592), shown for context and not "
                   "ranked: the paper states neither the images nor the decision rule it measured with.")
"""43 models: Table VIII less its 4 'trained' rows; 0.105 (VGG11) and 0.592 their lowest and highest cue-conflict
shape bias, read off the table."""


def test_only_the_published_image_list_with_the_published_rule_is_ranked(geirhos_names):
    bench = CueConflict()
    full = scorecard.score(bench, conflict_trials(geirhos_names))[0]
    assert full["comparable"] and full["rank"] is not None and full["human"] == 0.958
    assert full["value"] == pytest.approx(320 / 1280) and full["images"] == {"shape decisions": 1280}
    assert all("Not ranked" not in n for n in full["notes"])
    # ranked among Geirhos et al.'s three CNNs only; Heinert et al.'s 43 are context, never in the rank
    assert full["published_models"] == 3 and full["context"] == [HEINERT_CONTEXT]
    assert [(s["citation"], s["ranked"]) for s in full["sources"]] == [
        ("Geirhos et al. 2019, Fig. 4, from the released raw data", True), ("Heinert et al. 2024, Table VIII (appendix)", False)]

    subset = scorecard.score(bench, conflict_trials(geirhos_names[::40]))[0]   # what --per-class takes: a subset
    assert subset["rank"] is None and subset["human"] is None and len(subset["notes"]) == 1
    assert subset["notes"][0].startswith("Not ranked or compared with people: this run scored 32 images (image list ")
    assert "not the 1,280 images of Geirhos et al. 2019's cue-conflict set" in subset["notes"][0]
    assert subset["context"] == [HEINERT_CONTEXT] and not any(s["ranked"] for s in subset["sources"])

    other_rule = scorecard.score(bench, conflict_trials(geirhos_names, rule="16class-sum"))[0]
    assert other_rule["rank"] is None and other_rule["notes"] == [
        "Not ranked or compared with people: the model answered with the decision rule 16class-sum, and the "
        "reference decided with 16class-mean."]


@pytest.mark.shared
@pytest.mark.validates("scorecard place among the published sources measured as the run was",
                       definition="rank = 1 + the models scoring above the score among the sources that measured the "
                                  "run's image list with the run's decision rule; every other source shown apart, "
                                  "for context, with one sentence saying why",
                       source="this project (issue 49); Geirhos et al. 2019 raw data; Heinert et al. 2024, Eq. 6, "
                              "Table VIII",
                       reference="hand count: 0.239 lies below AlexNet 0.429 and GoogLeNet 0.312 and above VGG-16 "
                                 "0.172 (geirhos2019_shape_bias.csv), so place 3 of 4",
                       tolerance="exact")
def test_a_shape_bias_of_0_239_is_third_of_four_among_geirhos_cnns_only(geirhos_names):
    """EfficientNet-Lite0's shape bias on the full set (0.239): 306 of the 1,280 images answered with their shape,
    the rest with their texture. Counted by hand among the three CNNs of Geirhos et al.'s raw data, it is place 3
    of 4, and its whole interval (about 0.216-0.263) stays between GoogLeNet and VGG-16: ranks 3-3."""
    names = geirhos_names
    trials = conflict_trials(names).assign(response=["cat" if i < 306 else "dog" for i in range(len(names))])
    (entry,) = scorecard.score(CueConflict(), trials)
    assert round(entry["value"], 3) == 0.239
    assert (entry["rank"], entry["published_models"], entry["rank_range"]) == (3, 3, [3, 3])
    assert [s["rank"] for s in entry["sources"]] == [3, None]
    assert entry["context"] == [HEINERT_CONTEXT] and entry["human"] == 0.958
    assert "3 of 4 | Geirhos et al. 2019, Fig. 4, from the released raw data |" in card_markdown(
        {"model": "m", "package_version": "0", "commit": None, "created": "now", "reproduce": "r", "benchmarks": [],
         "metrics": [entry]})


def test_a_plugin_with_two_sources_is_ranked_among_the_comparable_one_only():
    """A third-party metric set beside two sources on the same 40 images: one decided with the run's rule, one
    with another. The score is ranked among the first source's models only, compared with its people only, and
    the second is shown for context with the sentence naming both rules."""
    from analysis.benchmarks import Benchmark, Cell, Metric, Published, PublishedSet, image_list_hash

    names = [f"photo{i:02d}" for i in range(40)]
    measured = PublishedSet("my 40 photos", 40, image_list_hash(names))
    same = Published(("burgert2025_table3",), measured, "16class-mean", human=0.9, human_label="my people",
                     models=(("a", 0.95), ("b", 0.5)))
    other = Published(("heinert_table8",), measured, "16class-sum", human=0.1, models=(("c", 0.99), ("d", 0.98)))

    class Photos(Benchmark):
        name = "photos"
        decision_rule = "16class-mean"

        def metrics(self, scored):
            return [Metric("accuracy", "accuracy", (Cell("originals", lambda t: t["condition"] == "original"),),
                           lambda p: p, lambda: (same, other))]

    trials = pd.DataFrame({"source_image": names, "trial_id": names, "condition": "original", "params": [{}] * 40,
                           "decision_rule": "16class-mean", "correct": [int(i < 30) for i in range(40)]})
    (entry,) = scorecard.score(Photos(), trials)
    assert entry["value"] == 0.75 and entry["rank"] == 2 and entry["published_models"] == 2   # below a, above b
    assert entry["human"] == 0.9 and entry["human_label"] == "my people"
    assert [(s["ranked"], s["rank"]) for s in entry["sources"]] == [(True, 2), (False, None)]
    assert entry["context"] == [
        "Heinert et al. 2024, Table VIII (appendix): 2 models (0.98-0.99) and people 0.1, shown for context and "
        "not ranked: the model answered with the decision rule 16class-mean, and the reference decided with "
        "16class-sum."]
    assert entry["sources"][1]["not_ranked_because"] in entry["context"][0]


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
    decisions = {"alexnet": 283 + 376, "googlenet": 228 + 503, "vgg": 130 + 625}   # geirhos2019_shape_bias.csv
    for model, published in {"alexnet": 0.429, "googlenet": 0.312, "vgg": 0.172}.items():
        (entry,) = scorecard.score(CueConflict(), trials[trials["observer"] == model])
        assert round(entry["value"], 3) == published, model
        assert entry["fewest"] == f"{decisions[model]} images with a shape or texture decision"   # not 1,280
        assert entry["ci_low"] < entry["value"] < entry["ci_high"] and entry["rank"] is None
        assert "decision rule unknown" in entry["notes"][0]
        assert entry["context"] == [HEINERT_CONTEXT]


@pytest.mark.validates("scorecard place among published models and the too-small-to-rank note",
                       definition="rank = 1 + published models above the score; the interval's ends give the rank "
                                  "range; a range wider than 2 ranks is 'too small to rank', naming what the smallest "
                                  "cell counts",
                       source="this project (issues 40, 49)", reference="hand count over five published values",
                       tolerance="exact")
def test_rank_rank_range_and_notes_by_hand():
    models = (("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5))
    assert scorecard.rank(0.75, models) == 3 and scorecard.rank(0.95, models) == 1 and scorecard.rank(0.1, models) == 6
    entry = {"value": 0.75, "ci_low": 0.55, "ci_high": 0.95, "human": 0.96, "human_range": None, "comparable": True,
             "not_ranked_because": None, "rank_range": [1, 5], "images": {"all": 40}, "published_models": 5,
             "fewest": "40 images per setting"}
    assert scorecard.notes(entry) == ["too small to rank: with 40 images per setting, the 95 % interval spans ranks "
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
print(entry["context"], entry["sources"][0]["ranked"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split() == ["sketches", "Accuracy", "on", "my", "800", "sketches."] for line in lines)
    assert "refused with 2" in lines and "benchmark sketches needs" in done.stderr and "data/sketches" in done.stderr
    # its one source measured other images (and decided by mean logits): not ranked, said in one sentence
    assert lines[-2] == ("0.5 Not ranked or compared with people: this run scored 2 images (image list "
                         f"{listing_hash(['a', 'b'])[:12]}), not the 800 images of Geirhos et al. 2019's sketches "
                         "(image list <sha256 of t) that the reference measured.")
    assert lines[-1] == "[] False"


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
