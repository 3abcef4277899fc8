"""Every figure of the reports as a journal takes it: each series its own colour and its own marker (no
repeat within a figure, up to the largest figure drawn: Burgert et al.'s 12 models beside the humans),
humans apart from models in greyscale (marker and line style), the legend outside the data, axis labels
with the parameter's unit, and every figure as PNG, SVG and PDF.

The figures are inspected as matplotlib objects before they are saved, and saved they are the same bytes in
every run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D

from analysis import figure_style, plots
from analysis.load import load_responses
from analysis.report import AnalysisOptions, analyze, make_figures
from analysis.reference import burgert2025_table3
from cuebench.responses import ResponseStore

CATEGORIES = ("boat", "car", "cat", "dog")
MODELS = tuple(f"model-{i:02d}" for i in range(13))
GRID = [("patch_shuffle", level, {"grid": g}) for level, g in enumerate((2, 3, 4, 6, 8))]
GRID += [("bilateral", level, {"d": d, "sigma_color": c}) for level, (d, c) in enumerate(((4, 50), (8, 110), (12, 170)))]
NO_MARKER = (None, "None", "none", "", " ")
PARAMETER_LABELS = {"patch shuffle": "grid cells per side", "bilateral": "d (px) / σ_colour (intensity)"}
"""The x label of each suppression panel, written out by hand from the transforms' parameters."""


def series(fig) -> list[tuple[str, str, str]]:
    """(label, colour, marker) of every legend entry of the figure that draws a marker: its series (the
    artists the legend was made from, an error bar by its data line)."""
    shown = {text.get_text() for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
             for text in legend.get_texts()}
    first = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            first.setdefault(label, handle)
    out = []
    for label, handle in first.items():
        line = handle.lines[0] if isinstance(handle, ErrorbarContainer) else handle
        if label in shown and isinstance(line, Line2D) and line.get_marker() not in NO_MARKER:
            out.append((label, to_hex(line.get_color()), str(line.get_marker())))
    return out


def assert_journal_ready(name: str, fig) -> None:
    entries = series(fig)
    colours = [c for _, c, _ in entries]
    markers = [m for _, _, m in entries]
    assert len(set(colours)) == len(colours), (name, entries)
    assert len(set(markers)) == len(markers), (name, entries)
    assert not [ax for ax in fig.axes if ax.get_legend()], f"{name}: a legend inside the axes"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if ax.get_visible():
                assert not box.overlaps(ax.get_window_extent(renderer)), f"{name}: legend over the data"


def answers(rng, p: float, n: int) -> list[int]:
    return [int(rng.random() < p) for _ in range(n)]


@pytest.fixture(scope="module")
def study_tables(tmp_path_factory):
    """Three people and 13 models on a suppression grid (patch shuffle; the bilateral filter's two parameters),
    cue-conflict images, oddity triplets with catch trials, cue decomposition, and an adaptive block."""
    rng = np.random.default_rng(4)
    rows = []
    observers = [(f"p{i}", "human", 0.95 - 0.03 * i) for i in range(3)]
    observers += [(m, "model", 0.9 - 0.04 * k) for k, m in enumerate(MODELS)]

    def add(observer, kind, **fields):
        correct = fields.pop("right")
        category = fields.get("category")
        truth = fields.pop("truth", category)
        rows.append({"experiment": "figures", "observer": observer, "observer_kind": kind, "session": "1",
                     "trial_index": len(rows), "role": "test", "trial_type": "classify",
                     "correct_answer": truth, "correct": correct,
                     "rt_ms": 600.0 if kind == "human" else None} | fields)

    for observer, kind, base in observers:
        for image in range(8):
            category = CATEGORIES[image % 4]
            for condition, level, params in [("original", None, {})] + GRID:
                strength = 0 if level is None else level + 1
                right = answers(rng, base * (1 - 0.16 * strength), 1)[0]
                add(observer, kind, trial_id=f"{category}{image}--{condition}--{level}", condition=condition,
                    level=level, params=params, category=category, right=right,
                    response=category if right else CATEGORIES[(image + 1) % 4])
            for condition in ("shape_cue", "texture_cue"):
                right = answers(rng, base * 0.7, 1)[0]
                add(observer, kind, trial_id=f"{category}{image}--{condition}", condition=condition, level=None,
                    params={}, category=category, right=right, response=category if right else CATEGORIES[0])
            texture = CATEGORIES[(image + 2) % 4]
            answer = category if rng.random() < (0.8 if kind == "human" else 0.4) else texture
            add(observer, kind, trial_id=f"{category}{image}--cue-conflict", condition="cue_conflict", level=None,
                params={}, category=category, texture_category=texture, response=answer, right=int(answer == category))
            right = answers(rng, 0.8 if kind == "human" else 0.5, 1)[0]
            add(observer, kind, trial_id=f"odd{image}", condition="dist" if image < 6 else "catch", level=None,
                params={}, category=category, trial_type="oddity", truth="2", response="2" if right else "1",
                right=right, role="test" if image < 6 else "catch")
        if kind == "human" or observer == MODELS[0]:
            for step, level in enumerate((2, 3, 1, 2)):
                add(observer, kind, trial_id=f"cat{step}--patch_shuffle--{level}", condition="patch_shuffle",
                    level=level, params=GRID[level][2], category="cat", response="cat", right=1,
                    session="adaptive:patch_shuffle",
                    adaptive={"quest_threshold": 3.5 + 0.2 * step + (0.3 if kind == "model" else 0),
                              "ci_low": 2.5, "ci_high": 5.0 + 0.1 * step, "trials": step + 1})
    store = tmp_path_factory.mktemp("figures") / "responses.sqlite"
    with ResponseStore(store) as responses:
        responses.write_many(rows)
    return analyze(load_responses(store), AnalysisOptions(n_choices=4, n_boot=20))


@pytest.mark.slow
def test_every_report_figure_has_distinct_series_and_its_legend_outside(study_tables):
    figures = make_figures(study_tables, "burgert2025")
    expected = {"reliance", "reliance_chance", "reference", "psychometric", "thresholds", "adaptive", "shape_bias",
                "oddity", "cue_decomposition", "consistency", "cd"}
    assert expected <= set(figures)
    for name, fig in figures.items():
        assert_journal_ready(name, fig)
    reliance = figures["reliance"]
    models = [s for s in series(reliance) if s[0].startswith("model-")]
    assert len(models) == 13  # thirteen model series, thirteen colours, thirteen markers
    reference = series(figures["reference"])
    assert len(reference) == 13 and dict((label, c) for label, c, _ in reference)["Humans"] == "#000000"


@pytest.mark.slow
def test_axes_carry_the_parameters_and_their_units(study_tables):
    figures = make_figures(study_tables, "burgert2025")
    psychometric = {"patch shuffle": "grid cells per side", "bilateral": "d (px)"}  # the axis of the fits: d grows
    for name, expected in (("reliance", PARAMETER_LABELS), ("reliance_chance", PARAMETER_LABELS),
                           ("psychometric", psychometric)):
        panels = [ax for ax in figures[name].axes if ax.get_visible() and ax.get_title()]
        labels = {ax.get_title().split("  (")[0]: ax.get_xlabel() for ax in panels}
        assert labels == expected, name
        assert all(ax.get_ylabel() for ax in panels if ax.get_subplotspec().is_first_col())
    ticks = [t.get_text() for t in figures["reliance"].axes[0].get_xticklabels()]
    assert ticks == ["4/50", "8/110", "12/170"]  # the bilateral filter's d / sigma_colour, not a level index
    assert figures["adaptive"].axes[0].get_xlabel() == "threshold, grid cells per side"
    thresholds = {ax.get_title(): ax.get_xlabel() for ax in figures["thresholds"].axes}
    assert thresholds and all(label == f"half-way threshold, {psychometric[title]}" for title, label in thresholds.items())


@pytest.mark.slow
def test_humans_and_models_differ_in_greyscale(study_tables):
    """In greyscale only shape and line style remain: the people's diamond on a solid line is no model's."""
    figures = make_figures(study_tables, "burgert2025")
    for name in ("reliance", "oddity", "adaptive", "cue_decomposition", "shape_bias"):
        entries = {label: marker for label, _, marker in series(figures[name])}
        human = [m for label, m in entries.items() if label.startswith("humans")]
        assert human and set(human) == {figure_style.HUMAN_MARKER}, name
        assert figure_style.HUMAN_MARKER not in {m for label, m in entries.items() if label.startswith("model-")}
    lines = {line.get_label(): line.get_linestyle() for ax in figures["reliance"].axes for line in ax.get_lines()}
    assert lines["humans (n=3)"] == "-" and {lines[m] for m in MODELS} == {"--"}
    heat = figures["consistency"].axes[0]
    weights = {t.get_text(): t.get_fontweight() for t in heat.get_yticklabels()}
    assert {weights[f"p{i}"] for i in range(3)} == {"bold"} and {weights[m] for m in MODELS} == {"normal"}


@pytest.mark.slow
def test_psychometric_panel_draws_every_observer_even_without_a_fit(study_tables):
    points = study_tables.tables["psychometric_points"]
    fits = study_tables.tables["thresholds"]
    fig = plots.psychometric_curves(points, study_tables.tables["psychometric_curves"], fits)
    drawn = {(ax.get_title().split("  (")[0], round(x, 6), round(y, 6)) for ax in fig.axes
             for line in ax.get_lines() if line.get_linestyle() in ("None", "none")
             for x, y in zip(line.get_xdata(), line.get_ydata())}
    for row in points.itertuples():
        assert (row.condition.replace("_", " "), round(row.x, 6), round(row.accuracy, 6)) in drawn


def test_the_palette_has_no_colour_twice_and_keeps_apart_from_black_grey_and_white():
    """13 colours, each at least 10 CIEDE2000 units from every other and from black, the reference grey and
    the white page (scikit-image's CIEDE2000, an implementation apart from the palette's choice)."""
    from skimage.color import deltaE_ciede2000, rgb2lab

    colours = list(figure_style.SERIES_COLOURS)
    assert len(colours) == len(set(colours)) == 13 == figure_style.MAX_DISTINCT_SERIES
    assert len(set(figure_style.SERIES_MARKERS)) == len(figure_style.SERIES_MARKERS)
    assert not {figure_style.HUMAN_MARKER, figure_style.REFERENCE_MARKER, "d"} & set(figure_style.SERIES_MARKERS)
    lab = [rgb2lab(np.array([[[int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]]]))[0, 0]
           for h in [*colours, figure_style.HUMAN, figure_style.REFERENCE, "#FFFFFF"]]
    for i in range(len(colours)):
        for j in range(i + 1, len(lab)):
            assert deltaE_ciede2000(lab[i], lab[j]) >= 10, (colours[i], j)
    styles = figure_style.series_styles([f"m{i:02d}" for i in range(26)])
    assert len({(s["color"], s["marker"], s["mfc"]) for s in styles.values()}) == 26  # hollow on the second round


def test_factor_and_cue_study_figures_follow_the_style(tmp_path):
    from analysis.cue_study import measures_figure
    from analysis.factor_studies import aggregate_figure

    rng = np.random.default_rng(0)
    methods = [("resnet18", "erm"), ("resnet18", "sagnet"), ("vit", "erm"), ("vit", "infodrop")]
    aggregates = pd.DataFrame([{"model": m, "algorithm": a, "study": study, "target": target, "FAAvg": rng.random(),
                                "FAAvg_se": 0.02, "FAMin": rng.random() / 2}
                               for m, a in methods for study in ("ZSO", "ZGO", "CGO-1") for target in ("shape", "hue")])
    per_run = pd.DataFrame([{"run": f"{a}-{r}", "algorithm": a, "dist_accuracy": rng.random(),
                             "shape_bias": rng.random(), "original_accuracy": rng.random()}
                            for a in ("erm", "padain", "distinguish", "sagnet", "infodrop") for r in range(3)])
    for name, fig in (("aggregates", aggregate_figure(aggregates)), ("measures", measures_figure(per_run))):
        assert_journal_ready(name, fig)
        assert len(series(fig)) == (len(methods) if name == "aggregates" else 5)
        assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes[:1])
        png = figure_style.save(fig, tmp_path / name)
        assert png.startswith(b"\x89PNG")
        assert {p.suffix for p in tmp_path.glob(f"{name}.*")} == {".png", ".svg", ".pdf"}


def test_reference_chart_uses_thirteen_distinct_styles():
    fig = plots.reference_bars(burgert2025_table3())
    assert_journal_ready("reference", fig)
    assert len(series(fig)) == 13


def cd_figure():
    """A critical-difference diagram whose Nemenyi test leaves methods under crossbars of three and more."""
    from analysis.ranking import friedman_nemenyi

    scores = pd.DataFrame(np.random.default_rng(0).normal(size=(6, 7)) + 0.3 * np.arange(7),
                          columns=[f"method-{i}" for i in range(7)])
    return plots.cd_plot(friedman_nemenyi(scores), humans=("method-3",))


def test_a_figure_is_the_same_bytes_in_every_run(tmp_path):
    """The figure saved here and in a run with another Python hash seed (scikit-posthocs draws a crossbar through
    its methods in a set's order) is the same PNG, SVG and PDF, with no time stamp or matplotlib version in them."""
    figure_style.save(cd_figure(), tmp_path / "here")
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"  # this run's own seed is random unless set
    subprocess.run([sys.executable, "-c", "import sys; from analysis.figure_style import save; "
                    "from test_figures import cd_figure; save(cd_figure(), __import__('pathlib').Path(sys.argv[1]))",
                    str(tmp_path / "there")], check=True, timeout=120,
                   env={**os.environ, "PYTHONHASHSEED": seed,
                        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(Path(__file__).parent)])})
    for fmt in figure_style.FORMATS:
        here, there = ((tmp_path / f"{run}.{fmt}").read_bytes() for run in ("here", "there"))
        assert here == there, f"the {fmt.upper()} differs between two runs"
        assert not re.search(rb"CreationDate|<dc:date>|matplotlib\.org|backend v", here), f"a stamp in the {fmt}"
