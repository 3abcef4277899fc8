"""The methods paragraph of a real small web pilot: the README's adaptive pilot built with ``cuebench stimuli build``,
served by ``cuebench serve`` on loopback, six people answering over HTTP (fixed trials, then the QUEST+ block) by a
script that knows each image's class and answers right with a probability falling with suppression, and
``cuebench report`` run from the folder with relative paths. Each sentence is checked against the folder's own
records: experiment.json, the stored responses and the tables results.json holds."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from experiment_server.simulate import ClientLog, ServerProcess, SimulatedParticipant, fill_consent, free_port, \
    instructed_answer, trial_answer

pytestmark = pytest.mark.slow  # a stimuli build, a server and six people over HTTP: about a minute

PEOPLE = 6
BUILD = ["stimuli", "build", "--design", "suppression", "--conditions", "patch_shuffle,grayscale", "--adaptive",
         "patch_shuffle:10", "--out", "exp/adaptive"]
"""The README's pilot with one condition measured adaptively, 10 QUEST+ trials instead of 40 (the server rebuilds a
block from its stored answers at every request, so a block's cost grows with the square of its length)."""


class ScriptedPerson(SimulatedParticipant):
    """A participant who knows the class of every image (from the experiment's stimuli) and answers right with
    probability 0.95 on originals, 0.85 in grayscale and, for patch shuffle, falling from 0.95 to chance 1/8 around
    grid 8; the fixed trials first, then the adaptive block one trial at a time, as the web task does."""

    def __init__(self, port: int, code: str, experiment: dict, seed: int):
        super().__init__(port, {"code": code}, ClientLog(), deadline_s=300)
        self.rng = np.random.default_rng(seed)
        trial_of = {s: t for t in experiment["trials"] for s in t["stimuli"]}
        self.trial_of = {experiment["stimuli"][s]["path"].split("/", 1)[1]: t for s, t in trial_of.items()}

    def answer(self, plan: dict) -> dict:
        if instructed_answer(plan):
            return trial_answer(plan)
        trial = self.trial_of[plan["images"][0].rsplit("/", 1)[1]]
        if trial["condition"] == "patch_shuffle":
            p = 1 / 8 + (0.95 - 1 / 8) * expit(-(trial["params"]["grid"] - 8) / 1.5)
        else:
            p = 0.95 if trial["condition"] == "original" else 0.85
        wrong = [c for c in plan["choices"] if c not in (trial["correct"], "not clear")]
        response = trial["correct"] if self.rng.random() < p else str(self.rng.choice(wrong))
        return trial_answer(plan) | {"response": response}

    def run(self) -> dict:
        token = self.start()
        plan = self.request("GET", f"/api/session/{token}").json()
        for trial in plan["trials"]:
            reply = self.request("POST", f"/api/session/{token}/trial/{trial['index']}",
                                 json.dumps(self.answer(trial)).encode(), "application/json")
            assert reply.status in (200, 201), reply.body
        adaptive = 0
        while not (step := self.request("GET", f"/api/session/{token}/adaptive").json())["done"]:
            reply = self.request("POST", step["trial"]["post"], json.dumps(self.answer(step["trial"])).encode(),
                                 "application/json")
            assert reply.status in (200, 201), reply.body
            adaptive += 1
        done = self.request("POST", f"/api/session/{token}/complete", b"{}", "application/json")
        assert done.status == 200, done.body
        return {"fixed": len(plan["trials"]), "adaptive": adaptive}


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """The folder after the pilot and its report: (root, experiment.json, what each person answered, paragraph,
    results.json)."""
    root = tmp_path_factory.mktemp("web-pilot")
    run = dict(cwd=root, capture_output=True, text=True, timeout=600)
    built = subprocess.run([sys.executable, "-m", "cuebench", *BUILD, "--workers", "1"], **run)
    assert built.returncode == 0, built.stderr
    experiment = json.loads((root / "exp" / "adaptive" / "experiment.json").read_text())
    fill_consent(root / "exp" / "adaptive")
    server = ServerProcess(root / "exp" / "adaptive", free_port())
    server.start()
    try:
        answered = [ScriptedPerson(server.port, f"P{k:02d}", experiment, seed=k).run() for k in range(1, PEOPLE + 1)]
    finally:
        server.stop()
    report = subprocess.run([sys.executable, "-m", "cuebench", "report", "exp/adaptive", "--out", "report",
                             "--n-boot", "50"], **run)
    assert report.returncode == 0, report.stderr
    text = pd.read_csv(root / "report" / "tables" / "methods.csv")["paragraph"].iloc[0]
    results = json.loads((root / "report" / "results.json").read_text())
    return root, experiment, answered, text, results


def test_the_test_trials_counted_are_the_fixed_ones_a_person_could_be_shown(pilot):
    _, experiment, answered, text, results = pilot
    tests = [t for t in experiment["trials"] if t["role"] == "test"]
    fixed = {t for group in experiment["assignment"]["groups"] for t in group}
    pool = len(tests) - len(fixed)
    assert pool > 0 and len(fixed) < len(tests)
    assert (f"Besides its {len(fixed)} fixed-level test trials (and a pool of {pool} test trials from which the "
            f"adaptive blocks chose) the experiment held") in text
    assert f"{len(tests)} test trials" not in text
    assert results["summary"]["adaptive_trials"] == sum(a["adaptive"] for a in answered) == PEOPLE * 10
    people = [row for row in results["tables"]["accuracy"] if row["observer_kind"] == "human"]
    attention = sum(t["role"] == "attention" for t in experiment["trials"])
    assert f"scored over {sum(row['n'] for row in people)} test trials of people" in text
    assert sum(row["n"] for row in people) == sum(a["fixed"] for a in answered) - PEOPLE * attention


def test_no_human_human_interval_is_described_without_a_pair_of_people(pilot):
    _, _, _, text, results = pilot
    pairs = results["tables"].get("error_consistency", [])
    human_pairs = [p for p in pairs if p["pair"] == "human-human" and p["kappa"] is not None]
    reference = (results["summary"].get("consistency") or {}).get("human_human_kappa")
    if not human_pairs:
        assert "jackknife" not in text and reference is None
    else:
        assert ("jackknife" in text) == (reference["ci_low"] is not None)


def test_thresholds_are_said_to_be_reported_only_where_a_series_was_fitted(pilot):
    _, _, _, text, results = pilot
    fits = results["tables"].get("thresholds", [])
    fitted = [row for row in fits if row["model"] is not None]
    if fitted:
        assert f"were fitted to {len(fitted)} of {len(fits)} observer x condition series" in text
    else:
        assert "reported as posterior medians" not in text
        if fits:
            assert f"could be fitted to none of the {len(fits)} observer x condition series" in text
    quest = [row for row in results["tables"]["adaptive_thresholds"] if row["fit"] == "individual"]
    assert f"QUEST+ thresholds (Watson 2017) are each of {len(quest)} observer(s)'" in text and len(quest) == PEOPLE


def test_every_section_sentence_is_the_one_recorded_and_every_count_is_the_folders(pilot):
    root, experiment, _, text, results = pilot
    recorded = {name: entry["method"]["sentence"] for name, entry in results["summary"].items()
                if isinstance(entry, dict) and isinstance(entry.get("method"), dict) and entry["method"].get("sentence")}
    for name, sentence in recorded.items():
        assert text.count(sentence) == 1, name
    assert f"{PEOPLE} participants were analysed ({PEOPLE} in the browser)." in text
    assert (f"Conditions rotated over {len(experiment['assignment']['groups'])} participant groups as a Latin "
            f"square") in text
    plan = experiment["adaptive"][0]
    assert f"by QUEST+ (Watson 2017) for {plan['trials']} trials" in text
    for sentence in re.split(r"(?<=\.) (?=[A-Z0-9])", text):
        numbers = [int(n) for n in re.findall(r"\b(\d+) (?:observer pair|pair)\(s\)", sentence)]
        if numbers and "Error consistency" in sentence:
            assert numbers[0] == len(results["tables"]["error_consistency"])
