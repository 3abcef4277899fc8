"""One look for every figure of the reports: palette, markers, legend placement and file formats.

Series colours are the Okabe & Ito (2008) colour-blind-safe palette; every series in a figure
also gets its own marker, so two series never share both, and humans keep a filled black
diamond with a solid line while models take hollow-able coloured markers with dashed lines,
which keeps the two kinds apart in greyscale print. A published reference is grey with a star.
Each figure is written as PNG (inlined in the HTML), SVG and PDF (for a journal).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
"""Okabe & Ito (2008), "Color Universal Design", without black (kept for humans) at the end."""
MODEL_COLOURS = OKABE_ITO[:7]
MODEL_MARKERS = ("o", "s", "^", "v", "P", "X", "<", ">", "p", "h", "*", "8", "d", "H")
HUMAN = "#000000"
HUMAN_MARKER = "D"
REFERENCE = "#7f7f7f"
REFERENCE_MARKER = "*"
FORMATS = ("png", "svg", "pdf")
STABLE_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}
"""No time stamp inside the files: the same data give the same bytes."""

RC = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9, "figure.dpi": 110,
      "savefig.dpi": 200, "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
      "pdf.fonttype": 42, "axes.grid": True, "grid.alpha": 0.25}
plt.rcParams.update(RC)


def series_styles(names) -> dict[str, dict]:
    """Colour, marker and line style per model series, in name order: colours cycle through the 7
    palette colours and markers through 14 shapes, so (colour, marker) pairs never repeat within
    98 series, and no two series share a marker up to 14."""
    return {name: {"color": MODEL_COLOURS[i % len(MODEL_COLOURS)], "marker": MODEL_MARKERS[i % len(MODEL_MARKERS)],
                   "ls": "--", "mfc": "white" if (i // len(MODEL_COLOURS)) % 2 else MODEL_COLOURS[i % len(MODEL_COLOURS)]}
            for i, name in enumerate(sorted(map(str, names)))}


def human_style(**extra) -> dict:
    """Humans: black filled diamonds on a solid line (the model series are coloured and dashed)."""
    return {"color": HUMAN, "marker": HUMAN_MARKER, "ls": "-", "mfc": HUMAN} | extra


def legend_outside(fig, axes, ncol: int | None = None) -> None:
    """One legend for the figure, right of the data (never over it), one entry per label."""
    handles = {}
    for ax in getattr(axes, "flat", [axes]):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("_"):
                handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5),
                   frameon=False, ncol=ncol or 1)


def save(fig, stem: Path) -> bytes:
    """Write ``stem``.png/.svg/.pdf, close the figure and return the PNG bytes (for inlining)."""
    from cuebench.expdir import atomic_write

    png = b""
    for fmt in FORMATS:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, bbox_inches="tight", metadata=STABLE_METADATA.get(fmt))
        atomic_write(stem.with_suffix(f".{fmt}"), buf.getvalue())
        png = buf.getvalue() if fmt == "png" else png
    plt.close(fig)
    return png
