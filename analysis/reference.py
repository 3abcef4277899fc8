"""The reference library: published numbers cuebench can compare with, read from versioned data files.

Every table lives as one CSV in ``analysis/references/``, and ``references/index.csv`` says for each what
it is: ``id, file, authors, year, title, table, page, units, version, applies_to, notes``. A number changes
only with the file's ``version``, so a scorecard or report that names ``id`` and ``version`` points at one
set of values. Reports show a reference only where it applies (:func:`burgert2025_applies`, the cue-conflict
section for Geirhos), labelled with its source (:func:`label`).

Burgert, Stoll, Rota & Demir (2025), Table 3: relative accuracy (accuracy under suppression / accuracy on
the originals) per suppressed feature, and the absolute accuracy on the originals, for their 20 human
participants and 12 models on the ImageNet16 images (16 classes). Each feature was suppressed by one fixed
transform: global shape = patch shuffle, grid 3; local shape = patch shuffle, grid 6; texture = bilateral
filter d = 12, sigma_colour = 170; colour = full grayscale (alpha 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from cuebench.errors import CuebenchError

LIBRARY = Path(__file__).with_name("references")
INDEX_COLUMNS = ("id", "file", "authors", "year", "title", "table", "page", "units", "version", "applies_to",
                 "notes")


@dataclass(frozen=True)
class Reference:
    """One published table: where it comes from and what it speaks about."""

    id: str
    file: str
    authors: str
    year: int
    title: str
    table: str
    page: str
    units: str
    version: int
    applies_to: str
    notes: str

    @property
    def citation(self) -> str:
        """Authors, year and table: "Heinert et al. 2024, Table VIII (appendix)"."""
        first = self.authors.split(",")[0].split(" &")[0].removesuffix(" et al.")
        return f"{first} et al. {self.year}, {self.table}"

    @property
    def label(self) -> str:
        """How a report or scorecard names the source: authors, year and table."""
        return f"published data, {self.citation}"


@lru_cache(maxsize=1)
def index() -> pd.DataFrame:
    """The library's index, one row per table, checked for its columns."""
    table = pd.read_csv(LIBRARY / "index.csv", dtype=str, keep_default_na=False)
    missing = set(INDEX_COLUMNS) - set(table.columns)
    if missing:
        raise CuebenchError(f"{LIBRARY / 'index.csv'}: missing column(s) {', '.join(sorted(missing))}")
    return table


@lru_cache(maxsize=None)
def reference(reference_id: str) -> Reference:
    """The index entry of one table (read once: a scorecard names its sources per score); an unknown id names
    the known ones."""
    rows = index()[index()["id"] == reference_id]
    if rows.empty:
        raise CuebenchError(f"unknown reference {reference_id!r}; known: {', '.join(index()['id'])}")
    row = rows.iloc[0].to_dict()
    return Reference(**{**row, "year": int(row["year"]), "version": int(row["version"])})


def load(reference_id: str) -> pd.DataFrame:
    """One table's values as published (a copy: callers may change it)."""
    return _read(reference(reference_id).file).copy()


def label(reference_id: str) -> str:
    return reference(reference_id).label


@lru_cache(maxsize=None)
def _read(file: str) -> pd.DataFrame:
    return pd.read_csv(LIBRARY / file)


BURGERT2025_LABEL = "published human data, Burgert et al. 2025, Table 3"

# feature -> (condition, parameters of the transform used)
BURGERT2025_FEATURES = {
    "global_shape": ("patch_shuffle", {"grid": 3}),
    "local_shape": ("patch_shuffle", {"grid": 6}),
    "texture": ("bilateral", {"d": 12, "sigma_color": 170}),
    "color": ("grayscale", {"alpha": 1.0}),
}

REFERENCES = ("burgert2025",)
"""The references ``cuebench report --reference`` may draw."""

GEIRHOS2019_LABEL = "published data, Geirhos et al. 2019, cue-conflict experiment"


def burgert2025_table3() -> pd.DataFrame:
    """Table 3 as rows ``observer, observer_kind, feature, condition, params, relative_accuracy`` plus the
    originals' accuracy (``feature == "original"``, column ``accuracy``), in the published row order."""
    rows = []
    for published in load("burgert2025_table3").itertuples(index=False):
        for feature, (condition, params) in BURGERT2025_FEATURES.items():
            rows.append({"observer": published.observer, "observer_kind": published.observer_kind,
                         "feature": feature, "condition": condition, "params": params,
                         "relative_accuracy": getattr(published, feature), "accuracy": None})
        rows.append({"observer": published.observer, "observer_kind": published.observer_kind,
                     "feature": "original", "condition": "original", "params": {}, "relative_accuracy": 1.0,
                     "accuracy": published.original_accuracy})
    return pd.DataFrame(rows)


def burgert2025_applies(conditions) -> bool:
    """Whether Table 3 speaks about an experiment with these conditions: it measured patch shuffle, the
    bilateral filter and grayscale, so a report of other suppressions (corruptions, blur) leaves it out."""
    return bool({condition for condition, _ in BURGERT2025_FEATURES.values()} & set(conditions))


def burgert2025_humans() -> pd.DataFrame:
    """The human row of Table 3 only: what the report draws as the published human reference."""
    table = burgert2025_table3()
    return table[table["observer"] == "Humans"].reset_index(drop=True)


def geirhos2019_summary() -> dict[str, float]:
    """Shape bias (shape / (shape + texture) decisions) in the raw data released with Geirhos et al. 2019
    (Fig. 4): the mean of the 10 participants' shape biases, and the three ImageNet CNNs, to 3 decimals."""
    table = load("geirhos2019_shape_bias")
    humans = table[table["observer_kind"] == "human"]
    models = table[table["observer_kind"] == "model"]
    return {f"Humans (mean of {len(humans)})": round(float(humans["shape_bias"].mean()), 3),
            **dict(zip(models["observer"], models["shape_bias"].astype(float)))}


def geirhos2019_shape_bias() -> pd.DataFrame:
    """The published shape biases as rows ``observer, shape_bias, source``: shown in cue-conflict reports
    only (the report's reference switch ``--reference none`` hides it with the Burgert table)."""
    summary = geirhos2019_summary()
    return pd.DataFrame({"observer": list(summary), "shape_bias": list(summary.values()),
                         "source": GEIRHOS2019_LABEL})

