"""Every word a participant reads that the researcher did not write, one catalogue per language (``en.json``,
``de.json``, ...).

The task screens of the web task and the lab runner, the server's pages (consent form, device check, study
full, errors), the trial types' prompts and task sentences, and the default study texts (``cuebench.texts``)
all look their words up here by key, in the study's language (``Experiment.language``, ``--language`` at
build), so a translation is one more file with the same keys and the same ``{name}`` places
(``tests/core/test_words.py`` checks each). A ``{name}`` in a text is filled in where it is shown (``say``).
Keys starting ``class_`` name the 16 ImageNet entry-level classes as that language's answer buttons show them
(the answer stored stays the English label). Keys starting ``claim_`` are regular expressions: how that
language's texts state a fact about the study (trial count, practice, breaks, time limit, duration), which
``cuebench.texts`` checks against the experiment.
The texts the researcher writes (consent, instructions, ...) are not here but in ``EXPDIR/texts/``.

A plug-in brings its own words (a design's debrief sentence, a transform's clause, a trial type's prompt and task
sentence) in a catalogue fragment beside its module: ``MODULE.words.json`` next to ``MODULE.py``, one object per
language with the same keys (:data:`FRAGMENT`). The plug-ins are found through the registries' entry points
(``cuebench.registry.plugin_modules``), never a list here; each language's catalogue is the core file merged with
every fragment's part in that language, and a key two files define is an error naming both."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from pathlib import Path

from ..errors import CuebenchError
from ..registry import module_file, plugin_modules

HERE = Path(__file__).parent
LANGUAGE = "en"
"""The default language, whose catalogue every other one mirrors key by key."""
FRAGMENT = ".words.json"
"""The suffix of a plug-in's catalogue fragment, beside its module (``dist.py`` -> ``dist.words.json``;
a package's ``__init__.py`` -> ``__init__.words.json``): ``{"en": {key: text}, "de": {...}}``."""
CORE = "cuebench/words"


class UnknownWords(CuebenchError):
    """No catalogue for a language, or no text under a key."""


def languages() -> list[str]:
    """The languages a study can run in: one catalogue each."""
    return sorted(p.stem for p in HERE.glob("*.json"))


def check_language(language: str) -> str:
    """``language`` when a catalogue exists for it; else an error naming the ones there are."""
    known = languages()
    if language not in known:
        close = difflib.get_close_matches(language, known, n=2, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownWords(f"no words for language {language!r} (there are: {', '.join(known)}){hint}; a translation "
                           f"is a copy of cuebench/words/{LANGUAGE}.json with every text translated (and a "
                           f"{LANGUAGE!r} part of each plug-in's {FRAGMENT} beside it)")
    return language


@cache
def words(language: str = LANGUAGE) -> dict[str, str]:
    """The catalogue of one language: key -> text (what the web server sends in the plan): the core's, then each
    plug-in's fragment's texts in that language."""
    sources()  # no two files define one key
    merged = _core(check_language(language))
    for fragment in fragments().values():
        merged.update(fragment.get(language, {}))
    return merged


def _core(language: str) -> dict[str, str]:
    return json.loads((HERE / f"{language}.json").read_text(encoding="utf-8"))


@cache
def fragments() -> dict[str, dict[str, dict[str, str]]]:
    """Every installed plug-in's catalogue fragment (:data:`FRAGMENT`), by its file as a package path
    (``stimuli/designs/dist.words.json``): language -> key -> text."""
    found = {}
    for module in plugin_modules():
        source = module_file(module)
        path = None if source is None else source.with_name(source.stem + FRAGMENT)
        if path is not None and path.is_file():
            package = module.split(".") if source.stem == "__init__" else module.split(".")[:-1]
            found["/".join([*package, path.name])] = _read_fragment(path, module)
    return found


def _read_fragment(path: Path, module: str) -> dict[str, dict[str, str]]:
    """A fragment's language -> key -> text, checked: an object per language of the core's, texts as strings."""
    where = f"the words of the plug-in module {module} ({path.name})"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UnknownWords(f"{where} cannot be read: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(texts, dict) for texts in data.values()):
        raise UnknownWords(f"{where} must be an object of languages, each an object of key -> text")
    unknown = sorted(set(data) - set(languages()))
    if unknown:
        raise UnknownWords(f"{where} has words in {unknown[0]!r}, for which cuebench has no catalogue (there are: "
                           f"{', '.join(languages())})")
    bad = [f"{lang}.{key}" for lang, texts in data.items() for key, text in texts.items() if not isinstance(text, str)]
    if bad:
        raise UnknownWords(f"{where}: {bad[0]} is not a text")
    return data


@cache
def sources() -> dict[str, str]:
    """Key -> the file that defines it: the core catalogue (``cuebench/words``) or a plug-in's fragment; a key
    that two files define is an error naming both (a plug-in's keys carry its name: ``debrief_NAME``)."""
    owner = dict.fromkeys(_core(LANGUAGE), CORE)
    for name, fragment in fragments().items():
        for key in dict.fromkeys(k for texts in fragment.values() for k in texts):
            if key in owner:
                raise UnknownWords(f"the words {key!r} are defined twice: in {owner[key]} and in {name}")
            owner[key] = name
    return owner


def missing_translations() -> dict[str, list[str]]:
    """``FILE: LANG`` -> the keys of that fragment's English words its LANG part lacks or adds, for every fragment
    and every language of the core (a plug-in's translation is checked as the core's catalogues are)."""
    out = {}
    for name, fragment in fragments().items():
        english = set(fragment.get(LANGUAGE, {}))
        for language in languages():
            differ = sorted(english ^ set(fragment.get(language, {})))
            if differ:
                out[f"{name}: {language}"] = differ
    return out


BUILD_ONLY = ("text_", "debrief_", "suppressed_", "claim_", "lab_", "class_")
"""Key prefixes of words no browser needs: the default texts' sentences and debrief clauses (which name the
conditions a plan must not reveal), the stale-text patterns, the lab's screens and the class names (each
trial's grid carries the names it shows)."""


def browser_words(language: str = LANGUAGE) -> dict[str, str]:
    """The catalogue less :data:`BUILD_ONLY`'s keys: what the web task's screens say (sent in the plan)."""
    return {key: text for key, text in words(language).items() if not key.startswith(BUILD_ONLY)}


def say(key: str, language: str = LANGUAGE, **values) -> str:
    """The text under ``key`` with its ``{name}`` places filled from ``values``."""
    try:
        return words(language)[key].format(**values)
    except KeyError as err:
        where = sources().get(key)
        if where is not None and key not in words(language):
            raise UnknownWords(f"the {language} words have no text {key!r}: add its translation to {where}") from None
        raise UnknownWords(f"the {language} words have no text {key!r} (or it needs {err})") from None



CONSONANT_SOUNDING = re.compile(r"(uni|unanim|u[bcdfgjklqrstvz][aeiouy]|eu|ewe|one\b|once\b)")
"""English words spelt with a vowel that start with a consonant sound: a "u" before one consonant and a vowel is
said "you" ("a unicorn", "a ukulele", "a utensil"; but "an umbrella", "an unusual"), and "a European", "a ewe",
"a one-way street" (Merriam-Webster's pronunciations)."""
VOWEL_SOUNDING = re.compile(r"(hour|honest|hono(u)?r|heir)")
"""English words spelt with a silent h ("an hour", "an honest answer")."""
VOWEL_LETTER_NAMES = "AEFHILMNORSX"
"""Capitals whose spoken names start with a vowel sound, for initialisms ("an MRI scanner", "an X-ray")."""


def with_article(noun: str, language: str = LANGUAGE) -> str:
    """``noun`` as a sentence of ``language`` names one of them: in English with "a" or "an" by how the word
    sounds (an owl, a unicorn, an hour, an X-ray); the other catalogues quote the noun instead, so it needs no
    article whose gender a class name would have to carry."""
    if language != "en" or not noun:
        return noun
    word = noun.split()[0].split("-")[0]
    if word.isupper() and len(word) <= 5:
        vowel = word[0] in VOWEL_LETTER_NAMES
    else:
        lower = word.lower()
        vowel = bool(VOWEL_SOUNDING.match(lower)) or (lower[:1] in "aeiou" and not CONSONANT_SOUNDING.match(lower))
    return f"{'an' if vowel else 'a'} {noun}"
