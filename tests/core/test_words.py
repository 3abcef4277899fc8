"""The catalogues of participant words (``cuebench/words/LANG.json`` and the plug-ins' fragments beside them):
every language has every key of the English one with the same ``{places}``, every key the code looks up exists and
every key is looked up, every fragment of the tree is found and translated, and a study's language is checked where
it is chosen (a plug-in's fragment from outside the tree: tests/system/test_plugin_words.py)."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from cuebench.trials import Experiment, LabelSet
from cuebench.words import (FRAGMENT, LANGUAGE, UnknownWords, check_language, fragments, languages,
                            missing_translations, say, words)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*ROOT.glob("cuebench/**/*.py"), *ROOT.glob("stimuli/**/*.py"), *ROOT.glob("human_tasks/**/*.py"),
           *ROOT.glob("experiment_server/*.py"), *ROOT.glob("analysis/**/*.py"), *ROOT.glob("human_tasks/web/static/**/*.js"),
           *ROOT.glob("human_tasks/web/templates/*.html")]
"""Where participant words are looked up."""


def places(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_a_second_language_exists():
    assert {"en", "de"} <= set(languages())


@pytest.mark.parametrize("language", [lang for lang in languages() if lang != LANGUAGE])
def test_every_catalogue_has_the_english_keys_and_places(language):
    """A missing or extra key, or a text that drops or invents a ``{place}``, is named; ``claim_*`` patterns
    compile and keep their number groups."""
    english, other = words(LANGUAGE), words(language)
    assert sorted(set(english) - set(other)) == [], f"{language}.json lacks these keys"
    assert sorted(set(other) - set(english)) == [], f"{language}.json has keys en.json does not"
    differing = {key: (places(english[key]), places(other[key])) for key in english
                 if not key.startswith("claim_") and places(english[key]) != places(other[key])}
    assert differing == {}, f"{language}.json: texts whose {{places}} differ from en.json's"
    for key in (k for k in english if k.startswith("claim_")):
        assert (re.compile(english[key]).groups > 0) == (re.compile(other[key]).groups > 0), key
    assert not [key for key in english if key != "page_title" and other[key] == english[key] and
                re.search(r"[a-z]{3} [a-z]{3}", english[key])], f"{language}.json: sentences left in English"


def test_every_key_looked_up_exists_and_every_key_is_looked_up():
    """``say("key")`` (and the keys a card, a debrief or the claims name) in the Python, JavaScript and
    templates: each exists in en.json, and each key of en.json is named somewhere, literally or by an
    f-string's prefix (``f"suppressed_{condition}"``)."""
    code = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    looked_up = set(re.findall(r"""(?<![\w.])(?:say|phrase|find)\(\s*["']([a-z_]+)["']|\.say\(\s*["']([a-z_]+)["']""",
                                 code))
    looked_up = {key for pair in looked_up for key in pair if key}
    keys = set(words())
    assert looked_up - keys == set()
    quoted = set(re.findall(r"""["']([a-z_]+)["']""", code))
    prefixes = set(re.findall(r"""f?["']([a-z_]+)\{""", code))
    unused = [key for key in keys if key not in quoted and not any(key.startswith(p) for p in prefixes)]
    assert unused == []


def test_every_fragment_beside_a_plugin_is_found_and_translated():
    """Each ``*.words.json`` of the tree sits beside a registered plug-in's module (found through the registries'
    entry points, none left unread) and has every language's words with the same keys."""
    packages = ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis")
    in_tree = {p.relative_to(ROOT).as_posix() for top in packages for p in (ROOT / top).rglob(f"*{FRAGMENT}")}
    assert in_tree and set(fragments()) == in_tree
    assert missing_translations() == {}


def test_an_unknown_language_is_refused_with_the_known_ones():
    with pytest.raises(UnknownWords, match=r"no words for language 'deu' \(there are: de, en\); did you mean de\?"):
        check_language("deu")
    with pytest.raises(Exception, match="field 'language'.*no words for language 'xx'"):
        Experiment(name="x", design="d", label_set=LabelSet("s", ("a",)), stimuli={}, trials=[], language="xx")


def test_an_english_experiment_file_has_no_language_field_and_a_german_one_keeps_it():
    english = Experiment(name="x", design="d", label_set=LabelSet("s", ("a",)), stimuli={}, trials=[])
    assert "language" not in english.to_dict()
    german = english.model_copy(update={"language": "de"})
    assert Experiment.from_dict(german.to_dict()).language == "de"


def test_durations_read_in_the_language():
    from cuebench.trial_types import seconds

    assert [seconds(ms) for ms in (200, 1000, 2500)] == ["0.2 seconds", "1 second", "2.5 seconds"]
    assert [seconds(ms, "de") for ms in (200, 1000, 2500)] == ["0,2 Sekunden", "1 Sekunde", "2,5 Sekunden"]
    assert say("progress_trial", "de", k=3, n=12) == "Durchgang 3 von 12"
