"""The suppression-quality table in the layout of Burgert et al. 2025, Table 2.

One row per transformation and parameter setting, with the mean of each appendix-A metric
over a set of photos. As in appendix A, every transform is applied to the grayscale
original (its luma repeated over three channels) and compared with it. Images are spread
over the machine's cores; a progress bar shows how far it is.
"""

from __future__ import annotations

import multiprocessing
import os
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .quality import METRICS, QualityError, Reference, to_gray
from .suppression import get_condition, suppress


@dataclass(frozen=True)
class TableRow:
    transform: str  # the display name, as in the paper
    param_id: str  # Table 2's legend letter, or "" for rows the paper's Table 2 lacks
    condition: str
    params: dict


TABLE2_SETTINGS: tuple[TableRow, ...] = (
    TableRow("Bilateral Filter", "A", "bilateral", {"d": 11, "sigma_color": 170, "sigma_space": 75}),
    TableRow("Box Blur", "B", "box_blur", {"ksize": 11}),
    TableRow("Gaussian Blur", "C", "gaussian_blur", {"ksize": 11, "sigma": 2.0}),
    TableRow("Median Filter", "D", "median_blur", {"ksize": 11}),
    TableRow("NLMeans Denoising", "E", "nonlocal_means", {"h": 20, "template_window": 11, "search_window": 11}),
    TableRow("Patch Shuffle", "F", "patch_shuffle", {"grid": 6}),
    TableRow("Patch Rotation", "F", "patch_rotation", {"grid": 6}),
    TableRow("Bilateral Filter (human study)", "", "bilateral", {"d": 12, "sigma_color": 170, "sigma_space": 75}),
    TableRow("Patch Shuffle (global shape)", "", "patch_shuffle", {"grid": 3}),
    TableRow("Grid Overlay (control)", "", "grid_overlay", {"grid": 6}),
)
"""Table 2's seven rows (legend A-F), then the human study's bilateral and global-shape
settings and the appendix-J grid-overlay control. Colour transforms have no row: the
metrics work on grayscale, where they change nothing."""

PAPER_TABLE2: dict[str, dict[str, float]] = {
    "Bilateral Filter": {"LV": .548, "HFE": .493, "ESSIM": .737, "GC": .855, "Texture": .521, "Shape": .796},
    "Box Blur": {"LV": .237, "HFE": .148, "ESSIM": .436, "GC": .289, "Texture": .193, "Shape": .363},
    "Gaussian Blur": {"LV": .392, "HFE": .306, "ESSIM": .744, "GC": .579, "Texture": .349, "Shape": .662},
    "Median Filter": {"LV": .399, "HFE": .316, "ESSIM": .584, "GC": .429, "Texture": .357, "Shape": .506},
    "NLMeans Denoising": {"LV": .723, "HFE": .690, "ESSIM": .730, "GC": .864, "Texture": .706, "Shape": .797},
    "Patch Shuffle": {"LV": 1.0, "HFE": 1.0, "ESSIM": .205, "GC": .147, "Texture": 1.0, "Shape": .176},
    "Patch Rotation": {"LV": 1.0, "HFE": 1.0, "ESSIM": .339, "GC": .247, "Texture": 1.0, "Shape": .293},
}
"""Burgert et al. Table 2 as published (800 ImageNet validation photos), for comparison."""

COLUMNS = ("transform", "params") + METRICS


def format_params(params: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items())


def _image_scores(job: tuple[np.ndarray, int, tuple[TableRow, ...]]) -> np.ndarray:
    """All rows' metrics for one image: an array (rows, metrics)."""
    image, seed, rows = job
    gray = np.repeat(to_gray(image).astype(np.uint8)[..., None], 3, axis=2)
    reference = Reference.of(gray)
    scores = [reference.compare(suppress(gray, row.condition, row.params, seed)) for row in rows]
    return np.array([[row_scores[m] for m in METRICS] for row_scores in scores])


def _context():
    """forkserver where there is one, else spawn: never fork a process whose OpenCV thread pool
    is running (a forked child can deadlock in it). Scripts need the usual main guard."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # the server imports OpenCV, scikit-image once, not each worker
    return context


def _single_threaded_opencv() -> None:
    import cv2

    cv2.setNumThreads(1)


def metrics_table(images: list[np.ndarray], seed: int = 0, progress: bool = True,
                  workers: int | None = None, rows: tuple[TableRow, ...] = TABLE2_SETTINGS) -> pd.DataFrame:
    """Mean LV, HFE, ESSIM, GC, Texture and Shape per row over ``images`` (HxWx3 uint8).

    Image i's stochastic transforms use seed ``seed + i``, so the table is reproducible and
    independent of the number of ``workers`` (default: all cores).
    """
    from tqdm import tqdm

    if not images:
        raise QualityError("the metrics table needs at least one image")
    for row in rows:
        get_condition(row.condition)
    jobs = [(image, seed + i, rows) for i, image in enumerate(images)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    pool = _context().Pool(workers, initializer=_single_threaded_opencv) if workers > 1 else nullcontext()
    with pool:
        mapped = pool.imap(_image_scores, jobs, chunksize=4) if workers > 1 else map(_image_scores, jobs)
        scores = list(tqdm(mapped, total=len(jobs), desc="quality metrics", unit="image", disable=not progress))
    table = pd.DataFrame(np.mean(scores, axis=0), columns=list(METRICS))
    table.insert(0, "params", [format_params(row.params) for row in rows])
    table.insert(0, "transform", [row.transform for row in rows])
    return table


def format_table(df: pd.DataFrame) -> str:
    """The table for a terminal, three decimals as in Table 2. Texture-suppressing rows want
    low LV/HFE and high ESSIM/GC, shape-suppressing rows the reverse (Table 2's arrows)."""
    shown = df.copy()
    for column in ("transform", "params"):
        shown[column] = shown[column].str.ljust(max(len(column), shown[column].str.len().max()))
    return shown.to_string(index=False, float_format="{:.3f}".format, justify="left")
