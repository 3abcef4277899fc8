"""CSV text that is safe to open in a spreadsheet: the one writer of every CSV the platform hands out.

Participants type text the researcher later opens in Excel or LibreOffice (an entry code,
a screen-out reason, an exclusion reason copied from an e-mail, a browser name). A cell
that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read there as a
formula (``=HYPERLINK(...)``, ``=cmd|...``): OWASP's "CSV injection". Following OWASP's
rule, such a cell gets a leading single quote, which spreadsheets show as text. Numbers
are not touched, neither as numbers nor as text (``-1.5`` stays a number), so the
analysis reads the columns it always did.

The files are comma-separated, but a spreadsheet set to a locale whose list separator is
``;`` (German, French, ...) splits each line at ``;`` instead, and ``x;=HYPERLINK(...)``,
one text cell for the CSV writer, becomes two cells there, the second a formula. So the
rule applies to every ``;``-separated part of a cell; a ``,`` needs nothing, since the
writer quotes a cell holding one and both kinds of spreadsheet honour the quotes. Such a
spreadsheet also takes a part that starts with ``"`` for a quoted cell and drops the quotes,
so ``x;"=1+2`` is the formula ``=1+2`` there: what counts is the part without its leading
quotes and spaces.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable, Mapping, Sequence

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _safe_part(text: str) -> str:
    shown = text.lstrip('" ')
    return "'" + text if shown.startswith(FORMULA_STARTS) and not _is_number(shown) else text


def safe_cell(value: Any) -> Any:
    """``value`` with a ``'`` before each ``;``-separated part a spreadsheet would take for a formula."""
    if isinstance(value, str):
        return ";".join(_safe_part(part) for part in value.split(";"))
    return value


def csv_text(header: Sequence[str], rows: Iterable[Mapping[str, Any] | Sequence[Any]], delimiter: str = ",",
             missing: str = "") -> str:
    """The CSV text of ``header`` and ``rows`` (mappings by column name, or sequences in
    header order), every cell through ``safe_cell``; missing keys and None are ``missing``
    (BIDS' TSV files write ``n/a``)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n", delimiter=delimiter)
    writer.writerow(header)
    for row in rows:
        cells = [row.get(name) for name in header] if isinstance(row, Mapping) else row
        writer.writerow([missing if cell is None else safe_cell(cell) for cell in cells])
    return buf.getvalue()


def frame_csv(frame) -> bytes:
    """A pandas DataFrame as UTF-8 CSV bytes (no index), every cell through ``safe_cell``."""
    from pandas.api.types import is_numeric_dtype

    text_columns = [c for c in frame.columns if not is_numeric_dtype(frame[c].dtype)]
    if text_columns:
        frame = frame.assign(**{c: frame[c].map(safe_cell) for c in text_columns})
    return frame.to_csv(index=False).encode("utf-8")
