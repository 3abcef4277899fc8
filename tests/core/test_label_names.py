"""What the answer buttons say: the 16 classes in German from the catalogue, a researcher's own classes from a
label-names file (whose English column maps German folder names to ImageNet), and English articles by sound."""

from __future__ import annotations

import pytest

from cuebench.label_names import LabelNamesError, named, read_label_names
from cuebench.labels import IMAGENET16, IMAGENET16_NAME
from cuebench.trials import NOT_CLEAR, LabelSet

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


def test_english_articles_follow_the_sound_of_the_word():
    """Each noun's article as a dictionary pronounces it (a hand-made list of the rule's cases and exceptions);
    other languages get the noun alone (their catalogues quote it)."""
    from cuebench.words import with_article

    expected = ["an owl", "a cat", "an airplane", "an hour", "an honest man", "a unicorn", "a ukulele", "a utensil",
                "a user", "an umbrella", "an urn", "an unusual item", "a European", "a one-way street", "an X-ray",
                "an MRI scanner", "a yacht", "an ice cream"]
    assert [with_article(e.split(" ", 1)[1]) for e in expected] == expected
    assert with_article("Eule", "de") == "Eule"
