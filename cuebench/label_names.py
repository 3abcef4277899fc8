"""What the answer buttons say: each label's name in the study's language.

The stored answer is always the label (``cat``, or a class folder's name), so every analysis, export and model
comparison reads the same values whatever language people answered in; only the button shows a name. The 16
ImageNet entry-level classes have theirs in each language's catalogue (``class_*`` in
``cuebench/words/LANG.json``: "Katze" for ``cat``). A researcher's own classes get theirs from a label-names
file given at build (``--label-names FILE``), a CSV with a ``label`` column (the class folder names) and one
column per language code::

    label,en,de
    Katze,cat,Katze
    Hund,dog,Hund

Its ``en`` column also says which ImageNet classes a label stands for when the label itself is no English
class name (German folder names): the model mapping follows the English name, as for English folders.
The names end up in ``experiment.json`` (``label_set.shown``), which both runners and the methods text read.
"""

from __future__ import annotations

import csv
from pathlib import Path

from pydantic import ValidationError

from .errors import CuebenchError
from .imagenet16 import IMAGENET16_INDICES
from .labels import IMAGENET16_NAME, imagenet_mapping
from .trials import LabelSet
from .words import check_language, words

LABEL_COLUMN = "label"
ENGLISH = "en"
"""The column whose names say which ImageNet classes a label stands for."""


class LabelNamesError(CuebenchError):
    """A label-names file that cannot name the study's labels; the message says what to fix."""


def read_label_names(path: str | Path) -> dict[str, dict[str, str]]:
    """label -> {language: name} from a label-names CSV (module docstring); every column after ``label`` must be
    a language a study can run in, every cell filled."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = [c.strip() for c in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError) as err:
        raise LabelNamesError(f"--label-names {path}: cannot read it ({err})") from None
    if LABEL_COLUMN not in columns or len(columns) < 2:
        raise LabelNamesError(f"--label-names {path}: expected a header `label,LANG,...` (e.g. label,en,de), "
                              f"got {','.join(columns) or 'nothing'}")
    for language in columns:
        if language != LABEL_COLUMN:
            try:
                check_language(language)
            except CuebenchError as err:
                raise LabelNamesError(f"--label-names {path}: column {language!r}: {err}") from None
    table: dict[str, dict[str, str]] = {}
    for number, row in enumerate(rows, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        empty = [c for c in columns if not row.get(c)]
        if empty:
            raise LabelNamesError(f"--label-names {path}:{number}: no {empty[0]} name")
        if row[LABEL_COLUMN] in table:
            raise LabelNamesError(f"--label-names {path}:{number}: label {row[LABEL_COLUMN]!r} a second time")
        table[row[LABEL_COLUMN]] = {c: row[c] for c in columns if c != LABEL_COLUMN}
    return table


def named(label_set: LabelSet, language: str, names_file: str | Path | None = None) -> LabelSet:
    """``label_set`` with the names its buttons show in ``language`` (``label_set.shown``): the file's, else the
    catalogue's for ImageNet-16 classes; a label with neither shows itself. With a file, its ``en`` names also
    give the ImageNet classes of the labels they rename (other than the 16 classes, which keep model-vs-human's
    lists). The file must name every label of the set, and only those, in ``language``."""
    table = read_label_names(names_file) if names_file is not None else {}
    if names_file is not None:
        strangers = sorted(set(table) - set(label_set.labels))
        missing = [label for label in label_set.labels if language not in table.get(label, {})]
        if strangers:
            raise LabelNamesError(f"--label-names {names_file}: {', '.join(strangers)} is no class of these images "
                                  f"(their classes: {', '.join(label_set.labels)})")
        if missing:
            raise LabelNamesError(f"--label-names {names_file} gives no {language!r} name for "
                                  f"{', '.join(missing)} (the study is built with --language {language})")
    catalogue = words(language)
    shown = {label: table[label][language] if label in table else catalogue.get(f"class_{label}", label)
             for label in label_set.labels}
    indices = dict(label_set.imagenet_indices)
    if label_set.name != IMAGENET16_NAME:  # the 16 classes keep model-vs-human's lists
        for label, names in table.items():
            if ENGLISH in names and names[ENGLISH] != label:  # the English name decides, not a folder name's
                english = names[ENGLISH]  # look-alike ("Boot" is German for boat, not ImageNet's boot)
                found = IMAGENET16_INDICES.get(english) or imagenet_mapping([english]).get(english)
                indices.pop(label, None)
                indices.update({label: list(found)} if found else {})
    try:
        return LabelSet.model_validate({**label_set.to_dict(), "imagenet_indices": indices,
                                        "shown": {k: v for k, v in shown.items() if v != k}})
    except ValidationError as err:
        raise LabelNamesError(f"the {language} names of the labels{f' in {names_file}' if names_file else ''}: "
                              f"{err.errors()[0]['msg']}") from None
