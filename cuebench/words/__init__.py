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
The texts the researcher writes (consent, instructions, ...) are not here but in ``EXPDIR/texts/``."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from pathlib import Path

from ..errors import CuebenchError

HERE = Path(__file__).parent
LANGUAGE = "en"
"""The default language, whose catalogue every other one mirrors key by key."""


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
                           f"is a copy of cuebench/words/{LANGUAGE}.json with every text translated")
    return language


@cache
def words(language: str = LANGUAGE) -> dict[str, str]:
    """The catalogue of one language: key -> text (what the web server sends in the plan)."""
    return json.loads((HERE / f"{check_language(language)}.json").read_text(encoding="utf-8"))


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
