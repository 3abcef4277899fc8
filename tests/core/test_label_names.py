"""What the answer buttons say: the 16 classes in German from the catalogue, a researcher's own classes from a
label-names file (whose English column maps German folder names to ImageNet), and English articles by sound."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from cuebench.label_names import LabelNamesError, named, read_label_names
from cuebench.labels import IMAGENET16, IMAGENET16_NAME
from cuebench.trials import NOT_CLEAR, LabelSet
from support import cuebench_in_process as cuebench

GERMAN = {"airplane": "Flugzeug", "bear": "Bär", "bicycle": "Fahrrad", "bird": "Vogel", "boat": "Boot",
          "bottle": "Flasche", "car": "Auto", "cat": "Katze", "chair": "Stuhl", "clock": "Uhr", "dog": "Hund",
          "elephant": "Elefant", "keyboard": "Tastatur", "knife": "Messer", "oven": "Ofen", "truck": "Lastwagen"}
"""The German nouns for the 16 entry-level classes, written down here from a dictionary, not from the catalogue."""


def test_a_german_study_names_the_16_classes_in_german_in_german_order():
    labels = named(LabelSet(IMAGENET16_NAME, IMAGENET16), "de")
    assert labels.shown == GERMAN and labels.labels == IMAGENET16  # the stored answers stay the English labels
    assert [labels.name_of(label) for label in labels.displayed()[:-1]] == [
        "Auto", "Bär", "Boot", "Elefant", "Fahrrad", "Flasche", "Flugzeug", "Hund", "Katze", "Lastwagen", "Messer",
        "Ofen", "Stuhl", "Tastatur", "Uhr", "Vogel"]  # a German dictionary's order: Bär between Auto and Boot
    assert labels.displayed()[-1] == NOT_CLEAR
    english = named(LabelSet(IMAGENET16_NAME, IMAGENET16), "en")
    assert english.shown == {} and english.displayed() == [*sorted(IMAGENET16), NOT_CLEAR]


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


def test_a_label_names_file_that_cannot_name_the_study_is_refused(tmp_path):
    labels = LabelSet("custom", ("hund", "katze"))
    cases = {"label,de\nhund,Hund\n": "gives no 'de' name for katze",
             "label,de\nhund,Hund\nkatze,Katze\nmaus,Maus\n": "maus is no class of these images",
             "label,de\nhund,Hund\nkatze,\n": "namen.csv:3: no de name",
             "label,xx\nhund,Hund\nkatze,Katze\n": "column 'xx': no words for language 'xx'",
             "name,de\nhund,Hund\n": "expected a header `label,LANG,...`",
             "label,de\nhund,Tier\nkatze,Tier\n": "two labels would show the same name 'Tier'"}
    for text, message in cases.items():
        (tmp_path / "namen.csv").write_text(text, encoding="utf-8")
        with pytest.raises(LabelNamesError, match=message):
            named(labels, "de", tmp_path / "namen.csv")
    (tmp_path / "namen.csv").write_text("label,de,en\nhund,Hund,dog\nkatze,Katze,cat\n", encoding="utf-8")
    assert read_label_names(tmp_path / "namen.csv") == {"hund": {"de": "Hund", "en": "dog"},
                                                        "katze": {"de": "Katze", "en": "cat"}}


def test_english_attention_checks_put_a_or_an_by_sound():
    """"the next image shows an owl", never "a owl"; "a unicorn" (a vowel letter, a consonant sound)."""
    from stimuli.designs.common import attention_trials

    labels = LabelSet("custom", ("cat", "owl", "unicorn"))
    originals = [("p1", "s1", "owl"), ("p2", "s2", "unicorn"), ("p3", "s3", "cat")]
    shown = [t.instruction.split(". ")[0] for t in attention_trials(labels, originals, seed=0, language="en")]
    assert shown == ["Attention check: the next image shows an owl", "Attention check: the next image shows a unicorn",
                     "Attention check: the next image shows a cat"]


def test_english_articles_follow_the_sound_of_the_word():
    """Each noun's article as a dictionary pronounces it (a hand-made list of the rule's cases and exceptions);
    other languages get the noun alone (their catalogues quote it)."""
    from cuebench.words import with_article

    expected = ["an owl", "a cat", "an airplane", "an hour", "an honest man", "a unicorn", "a ukulele", "a utensil",
                "a user", "an umbrella", "an urn", "an unusual item", "a European", "a one-way street", "an X-ray",
                "an MRI scanner", "a yacht", "an ice cream"]
    assert [with_article(e.split(" ", 1)[1]) for e in expected] == expected
    assert with_article("Eule", "de") == "Eule"
