"""The classification response screen: labels in a 4x4 grid, "not clear" below it.

Burgert et al. 2025 (human protocol) show the 16 labels in alphabetical order in a 4x4
grid plus a "not clear" option. Labels come from ``LabelSet.displayed()`` (alphabetical
unless the label set says otherwise), each button naming its label in the study's language
(``LabelSet.name_of``), and fill the grid row by row; "not clear" sits
centred below the last row. Geometry is in pixels with (0, 0) at the screen centre and
y pointing up (PsychoPy's ``pix`` units), so the runner draws and hit-tests the same cells.

Keyboard mapping: the grid mirrors the 4x4 block of keys at the left of a QWERTY
keyboard, row by row — ``1 2 3 4`` / ``q w e r`` / ``a s d f`` / ``z x c v`` — and the
space bar answers "not clear". Trial types answered by other keys (oddity: ``1``, ``2``, ``3``,
the image's position from the left, as in DiST) name them on their cards (``cuebench.trial_types``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cuebench.errors import CuebenchError
from cuebench.runner_contract import allowed_responses
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Trial

KEY_ROWS = ("1234", "qwer", "asdf", "zxcv")
NOT_CLEAR_KEY = "space"
COLUMNS = 4


class LayoutError(CuebenchError):
    """The label set does not fit the requested response screen."""


@dataclass(frozen=True)
class Cell:
    """One answer button: its label (the answer stored), the name it shows (the label in the study's language;
    "not clear" is the runners' word), grid place, key, and rectangle (centre and size, px)."""

    label: str
    name: str
    row: int
    col: int | None  # None for "not clear", which spans the grid's middle
    key: str | None
    x: float
    y: float
    width: float
    height: float

    def contains(self, x: float, y: float) -> bool:
        return abs(x - self.x) <= self.width / 2 and abs(y - self.y) <= self.height / 2


@dataclass(frozen=True)
class ResponseGrid:
    cells: tuple[Cell, ...]

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.cells]

    def cell(self, label: str) -> Cell:
        for c in self.cells:
            if c.label == label:
                return c
        raise KeyError(label)

    def cell_at(self, x: float, y: float) -> Cell | None:
        """The cell under a point (a mouse click), or None between cells."""
        return next((c for c in self.cells if c.contains(x, y)), None)

    def label_for_key(self, key: str) -> str | None:
        return next((c.label for c in self.cells if c.key == key), None)

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.cells if c.key is not None]

    @property
    def has_all_keys(self) -> bool:
        return all(c.key is not None for c in self.cells)

    def places(self, experiment: Experiment, trial: Trial) -> list[dict] | None:
        """Where each answer button of a trial answered on the label grid sits (a ``TrialPlan``'s ``grid``:
        its answers' cells, so the lab and the browser show the same grid in the same order); None for a
        trial answered otherwise."""
        if trial.card.response != "label-grid":
            return None
        allowed = set(allowed_responses(experiment, trial))
        return [{"label": c.label, "name": c.name, "row": c.row, "col": c.col} for c in self.cells
                if c.label in allowed]


def response_grid(label_set: LabelSet, cell_width: float = 200, cell_height: float = 64,
                  gap: float = 14, centre_y: float = 0) -> ResponseGrid:
    """Cells for ``label_set.displayed()``: row-major in ``COLUMNS`` columns, "not clear"
    below the grid, twice as wide as a cell; the whole block centred at ``(0, centre_y)``.

    Labels beyond the 16 keyed places get no key (mouse only)."""
    displayed = label_set.displayed()
    labels = [lab for lab in displayed if lab != NOT_CLEAR]
    if not labels:
        raise LayoutError(f"label set {label_set.name!r} has no labels to show")
    rows = math.ceil(len(labels) / COLUMNS)
    total_rows = rows + (1 if NOT_CLEAR in displayed else 0)
    pitch_x, pitch_y = cell_width + gap, cell_height + gap
    top = centre_y + (total_rows - 1) * pitch_y / 2
    cells = []
    for i, label in enumerate(labels):
        row, col = divmod(i, COLUMNS)
        key = KEY_ROWS[row][col] if row < len(KEY_ROWS) else None
        x = (col - (COLUMNS - 1) / 2) * pitch_x
        cells.append(Cell(label, label_set.name_of(label), row, col, key, x, top - row * pitch_y, cell_width,
                          cell_height))
    if NOT_CLEAR in displayed:
        cells.append(Cell(NOT_CLEAR, NOT_CLEAR, rows, None, NOT_CLEAR_KEY, 0.0, top - rows * pitch_y,
                          2 * cell_width + gap, cell_height))
    return ResponseGrid(tuple(cells))


def row_positions(count: int, image_width: float, gap: float = 40) -> list[float]:
    """Horizontal centres (px) of ``count`` images side by side, centred on the screen."""
    pitch = image_width + gap
    return [(i - (count - 1) / 2) * pitch for i in range(count)]
