"""Every word a participant reads that the researcher did not write, one catalogue per language (``en.json``,
``de.json``, ...).

The task screens of the web task and the lab runner, the server's pages (consent form, device check, study
full, errors), the trial types' prompts and task sentences, and the default study texts (``cuebench.texts``)
all look their words up here by key, in the study's language (``Experiment.language``, ``--language`` at
build), so a translation is one more file with the same keys and the same ``{name}`` places
(``tests/core/test_words.py`` checks each). A ``{name}`` in a text is filled in where it is shown (``say``).
Keys starting ``class_`` name the 16 ImageNet entry-level classes as that language's answer buttons show them (the
answer stored stays the English label). Keys starting ``claim_`` are regular expressions: how that language's texts state a fact about the study
(trial count, practice, breaks, time limit, duration), which ``cuebench.texts`` checks against the experiment.
The texts the researcher writes (consent, instructions, ...) are not here but in ``EXPDIR/texts/``."""

from __future__ import annotations

import difflib
import json
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


def with_article(noun: str, language: str = LANGUAGE) -> str:
    """``noun`` as a sentence of ``language`` names one of them: in English with "a" or "an" by how the word
    sounds (``inflect``: an owl, a unicorn, an hour); the other catalogues quote the noun instead, so it needs
    no article whose gender a class name would have to carry."""
    if language != "en":
        return noun
    return _english().a(noun)


@cache
def _english():
    import inflect

    return inflect.engine()
