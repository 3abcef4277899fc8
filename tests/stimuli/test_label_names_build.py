"""Label names reach what a design builds: a label-names file names a set's own classes (and maps German folder
names to ImageNet through their English names), and attention checks put "a" or "an" by sound. The names
themselves are checked in ``tests/core/test_label_names.py``."""

from __future__ import annotations

import json

from PIL import Image

from cuebench.trials import LabelSet
from stimuli.designs.common import attention_trials
from support import cuebench_in_process as cuebench


def test_a_label_names_file_names_a_sets_own_classes_and_maps_german_folders_to_imagenet(tmp_path, photos):
    """Folders named in German (katze, boot, teekanne) with a file giving each its English and German name: the
    German study's buttons say Katze, Boot, Teekanne, its answers are the folder names, and models answer through
    the ImageNet classes of the English names: model-vs-human's lists for cat and boat (Geirhos et al. 2021),
    ImageNet's teapot (849) — never ImageNet's cowboy boot (514), which the folder name "boot" alone would match.
    The same file names the buttons of an English build in English."""
    for folder, photo in (("katze", "chelsea"), ("boot", "coffee"), ("teekanne", "rocket")):
        (tmp_path / "bilder" / folder).mkdir(parents=True)
        Image.fromarray(photos[photo]).save(tmp_path / "bilder" / folder / f"{photo}.png")
    (tmp_path / "namen.csv").write_text("label,en,de\nkatze,cat,Katze\nboot,boat,Boot\nteekanne,teapot,Teekanne\n",
                                        encoding="utf-8")
    for language in ("de", "en"):
        cuebench(tmp_path, "stimuli", "build", "--design", "labelled-set", "--images", "bilder", "--label-names",
                 "namen.csv", "--language", language, "--attention", "0", "--workers", "1", "--out", language)
    german = json.loads((tmp_path / "de" / "experiment.json").read_text(encoding="utf-8"))
    assert german["label_set"]["labels"] == ["boot", "katze", "teekanne"]
    assert german["label_set"]["shown"] == {"boot": "Boot", "katze": "Katze", "teekanne": "Teekanne"}
    assert german["label_set"]["imagenet_indices"] == {"katze": [281, 282, 283, 284, 285, 286],
                                                       "boot": [472, 554, 625, 814, 914], "teekanne": [849]}
    assert {t["correct"] for t in german["trials"]} == {"boot", "katze", "teekanne"}
    english = json.loads((tmp_path / "en" / "experiment.json").read_text(encoding="utf-8"))
    assert english["label_set"]["shown"] == {"boot": "boat", "katze": "cat", "teekanne": "teapot"}


def test_english_attention_checks_put_a_or_an_by_sound():
    """"the next image shows an owl", never "a owl"; "a unicorn" (a vowel letter, a consonant sound)."""
    labels = LabelSet("custom", ("cat", "owl", "unicorn"))
    originals = [("p1", "s1", "owl"), ("p2", "s2", "unicorn"), ("p3", "s3", "cat")]
    shown = [t.instruction.split(". ")[0] for t in attention_trials(labels, originals, seed=0, language="en")]
    assert shown == ["Attention check: the next image shows an owl", "Attention check: the next image shows a unicorn",
                     "Attention check: the next image shows a cat"]
