"""The words of the task screens every participant reads, one catalogue per language (``en.json``).

The trial types' own words (a response screen's prompt, how to answer) sit on their cards
(``cuebench.trial_types``); everything else the web task and the lab runner say is here, under
one key each, so a translation is one more file (``de.json`` with the same keys). A ``{name}`` in
a text is filled in where it is shown (``say``)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from cuebench.errors import CuebenchError

HERE = Path(__file__).parent
LANGUAGE = "en"


class UnknownWords(CuebenchError):
    """No catalogue for a language, or no text under a key."""


@cache
def words(language: str = LANGUAGE) -> dict[str, str]:
    """The catalogue of one language: key -> text (what the web server sends in the plan)."""
    path = HERE / f"{language}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in HERE.glob("*.json")))
        raise UnknownWords(f"no words for language {language!r} (there are: {known})")
    return json.loads(path.read_text(encoding="utf-8"))


def say(key: str, language: str = LANGUAGE, **values) -> str:
    """The text under ``key`` with its ``{name}`` places filled from ``values``."""
    try:
        return words(language)[key].format(**values)
    except KeyError as err:
        raise UnknownWords(f"the {language} words have no text {key!r} (or it needs {err})") from None
