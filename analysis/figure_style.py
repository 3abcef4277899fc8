"""One look for every figure of the reports: palette, markers, legend placement and file formats.

Series colours come from Paul Tol's colour-blind-safe qualitative schemes (Tol 2021, "Colour Schemes",
SRON/EPS/TN/09-002, https://personal.sron.nl/~pault/): all of *bright* but its grey, then from *muted*,
*vibrant* and *light* each colour at least 10 CIEDE2000 units from every colour taken before it and from
black (humans), the reference grey and white (the page): :data:`SERIES_COLOURS`, 13 colours, the most any
figure of the project needs (Burgert et al.'s Table 3: 12 models beside the humans). Every series also gets
its own marker (:data:`SERIES_MARKERS`, 13 shapes, none a diamond or a star), so up to 13 series in a figure
repeat neither colour nor marker; from the 14th on, colours and markers come round again, hollow.
Humans keep a filled black diamond on a solid line, models a coloured marker on a dashed line, which keeps
the two kinds apart in greyscale print. A published reference is grey with a star. Each figure is written
as PNG (inlined in the HTML), SVG and PDF (for a journal).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377",  # Tol bright
                  "#332288", "#44AA99", "#999933",  # Tol muted: indigo, teal, olive
                  "#EE7733", "#CC3311",  # Tol vibrant: orange, red
                  "#77AADD", "#FFAABB")  # Tol light: light blue, pink
"""Model series colours, in the order series get them (module docstring: how they were chosen)."""
SERIES_MARKERS = ("o", "s", "^", "v", "<", ">", "P", "X", "p", "h", "8", "1", "2")
"""One shape per series; the humans' diamond and the reference's star are not among them."""
MAX_DISTINCT_SERIES = min(len(SERIES_COLOURS), len(SERIES_MARKERS))
HUMAN = "#000000"
HUMAN_MARKER = "D"
REFERENCE = "#7f7f7f"
REFERENCE_MARKER = "*"
FORMATS = ("png", "svg", "pdf")
STABLE_METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None},
                   "pdf": {"CreationDate": None, "Creator": None, "Producer": None}}
"""No time stamp nor matplotlib's version inside the files (the report's provenance.json keeps the versions):
the same data give the same bytes, with ``svg.hashsalt`` in :data:`RC` fixing the ids of an SVG's clip paths."""

RC = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9, "figure.dpi": 110,
      "savefig.dpi": 200, "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
      "svg.hashsalt": "cuebench", "pdf.fonttype": 42, "axes.grid": True, "grid.alpha": 0.25}
plt.rcParams.update(RC)


def series_styles(names) -> dict[str, dict]:
    """Colour, marker and line style per model series, in name order: up to :data:`MAX_DISTINCT_SERIES`
    series each have a colour and a marker of their own (filled); beyond that the colours and markers
    come round again, hollow, so (colour, marker, fill) still never repeats up to twice as many."""
    styles = {}
    for i, name in enumerate(sorted(map(str, names))):
        colour, marker = SERIES_COLOURS[i % len(SERIES_COLOURS)], SERIES_MARKERS[i % len(SERIES_MARKERS)]
        hollow = (i // MAX_DISTINCT_SERIES) % 2 == 1
        styles[name] = {"color": colour, "marker": marker, "ls": "--", "mfc": "white" if hollow else colour}
    return styles


def style_of(observer: str, kind: str, styles: dict) -> dict:
    """The style of one observer: :func:`human_style` for a person, else its entry of ``styles``."""
    return human_style() if kind == "human" else styles[str(observer)]


def marker_only(style: dict) -> dict:
    """A series style for points without a connecting line."""
    return {k: v for k, v in style.items() if k != "ls"}


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
    """Write ``stem``.png/.svg/.pdf, close the figure and return the PNG bytes (for inlining).

    The tight crop is measured once, after one draw that runs the figure's layout: ``bbox_inches="tight"``
    would draw the figure once more per format to measure it (a third of a report's time in figures)."""
    from cuebench.expdir import atomic_write

    fig.draw_without_rendering()
    crop = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    png = b""
    for fmt in FORMATS:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, bbox_inches=crop, metadata=STABLE_METADATA.get(fmt))
        atomic_write(stem.with_suffix(f".{fmt}"), buf.getvalue())
        png = buf.getvalue() if fmt == "png" else png
    plt.close(fig)
    return png
