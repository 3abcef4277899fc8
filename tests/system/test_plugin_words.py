"""A plug-in's participant words from outside the tree: a design installed beside cuebench brings its catalogue
fragment, merged per language; a missing translation or a key taken twice is named (the core's words loader,
run in a fresh interpreter with the plug-in package on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import plugin_package

TINY = {"tiny_design.py": '"""A design that makes tiny images."""\n',
        "tiny_design.words.json": json.dumps({"en": {"debrief_tiny": "The images were tiny."}})}
CLASH = {"clash.py": '"""A design whose words take a core key."""\n',
         "clash.words.json": json.dumps({lang: {"debrief_and": "and"} for lang in ("en", "de")})}
CHECK = """
from cuebench.texts import debrief_sentence
from cuebench.trials import Experiment, LabelSet
from cuebench.words import UnknownWords, missing_translations, words
study = Experiment(name="x", design="tiny", label_set=LabelSet("s", ("a",)), stimuli={}, trials=[])
print(words()["debrief_tiny"], "|", debrief_sentence(study), "|", missing_translations())
try:
    debrief_sentence(study.model_copy(update={"language": "de"}))
except UnknownWords as err:
    print(err)
"""


def run_with_plugins(root: Path, modules: dict[str, dict[str, str]]) -> subprocess.CompletedProcess:
    """``CHECK`` in a fresh interpreter with a package of designs (module stem -> files) installed beside cuebench."""
    entry_points = {"cuebench.designs": {stem.replace("_design", ""): f"{stem}:Design" for stem in modules}}
    plugin_package(root, "words-plugins", entry_points, {n: t for files in modules.values() for n, t in files.items()})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=120)


def test_a_plugin_s_fragment_is_merged_and_its_missing_translation_or_a_taken_key_is_named(tmp_path):
    """A design installed from outside the tree brings its debrief in ``tiny_design.words.json``: the English study's
    debrief is its sentence, a German study's is refused naming the file that lacks the translation; a fragment
    defining a key the core has is refused naming both."""
    done = run_with_plugins(tmp_path / "one", {"tiny_design": TINY})
    assert done.returncode == 0, done.stderr
    merged, missing = done.stdout.strip().splitlines()
    assert merged == "The images were tiny. | The images were tiny. | {'tiny_design.words.json: de': ['debrief_tiny']}"
    assert missing == "the de words have no text 'debrief_tiny': add its translation to tiny_design.words.json"
    clashing = run_with_plugins(tmp_path / "two", {"tiny_design": TINY, "clash": CLASH})
    assert clashing.returncode == 1
    assert "UnknownWords: the words 'debrief_and' are defined twice: in cuebench/words and in clash.words.json" \
        in clashing.stderr
