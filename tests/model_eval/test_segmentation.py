"""Segmentation cue decomposition (Heinert et al. Sec. IV-B): labelled sets and their checks, masks
that follow the texture cue's shuffle pixel by pixel, mIoU from stored confusion matrices against
hand counts, Table III and Table XIV recomputed from their published components, segmentation
observers, and the documented commands from a labelled set to a report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from analysis import metrics, plots, segmentation
from analysis.sections.segmentation import example_panels
from cuebench.errors import CuebenchError
from cuebench.expdir import ExperimentDir
from cuebench.images import decode_image
from cuebench.segmentation import IGNORE, SegmentationSetError, labelled_set, read_mask_file, refuse_for_people
from stimuli.texture_cues import shuffle_with_mask, voronoi_source

from support import CLASSES, save_segmenter, write_set  # noqa: E402


def save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_labelled_sets_read_each_convention_and_name_the_bad_file(tmp_path):
    generic = write_set(tmp_path / "generic", photos=2)
    conv, items = labelled_set(generic, "generic")
    assert conv.classes == tuple(CLASSES) and [i.name for i in items] == ["scene0", "scene1"]
    image, mask = items[0].read()
    assert image.shape == (64, 64, 3) and mask[0, 0] == IGNORE and set(np.unique(mask)) <= {0, 1, 2, IGNORE}

    # ADE20k: 0 -> ignored, k -> k - 1; shorter side to 512, centre crop 512, masks nearest neighbour
    ade = tmp_path / "ade"
    values = np.zeros((40, 80), dtype=np.uint8)
    values[:, 40:] = 150  # "flag", the last class
    values[:, 20:40] = 1  # "wall"
    save(ade / "images" / "ADE_val_1.jpg", np.full((40, 80, 3), 128, dtype=np.uint8))
    save(ade / "labels" / "ADE_val_1.png", values)
    conv, (item,) = labelled_set(ade, "ade20k")
    image, mask = item.read()
    assert image.shape == (512, 512, 3) and mask.shape == (512, 512) and len(conv.classes) == 150
    # the 1024-wide resize keeps columns 256..767: source columns 20..59, i.e. wall (0) then flag (149)
    assert set(np.unique(mask)) == {0, 149} and mask[0, 0] == 0 and mask[0, 511] == 149

    # Cityscapes: X_leftImg8bit.png finds X_gtFine_labelTrainIds.png; 255 is ignored, 19 is no class
    city = tmp_path / "city"
    ids = np.full((8, 16), 255, dtype=np.uint8)
    ids[:4] = 13  # car
    save(city / "images" / "a_leftImg8bit.png", np.zeros((8, 16, 3), dtype=np.uint8))
    save(city / "labels" / "a_gtFine_labelTrainIds.png", ids)
    conv, (item,) = labelled_set(city, "cityscapes", scale=0.5)
    assert conv.classes[13] == "car" and item.read()[1].shape == (4, 8)
    ids[5, 7] = 19
    save(city / "labels" / "a_gtFine_labelTrainIds.png", ids)
    with pytest.raises(SegmentationSetError, match=r"a_gtFine_labelTrainIds.png: value 19 at \(row 5, column 7\)"):
        labelled_set(city, "cityscapes")

    (generic / "labels" / "scene1.png").unlink()
    with pytest.raises(SegmentationSetError, match="images/scene1.png has no label mask"):
        labelled_set(generic, "generic")
    save(generic / "labels" / "scene1.png", np.zeros((32, 64), dtype=np.uint8))
    with pytest.raises(SegmentationSetError, match=r"scene1.png is 64x32 but its photo scene1.png is 64x64"):
        labelled_set(generic, "generic")


def position_image(height: int, width: int) -> np.ndarray:
    """An image whose pixel (y, x) holds its own position: (y, x, 0)."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack([yy, xx, np.zeros_like(yy)], axis=-1).astype(np.uint8)


@pytest.mark.parametrize("kind", ["voronoi", "patch", "diamond"])
def test_the_mask_follows_the_shuffle_pixel_by_pixel(kind):
    rng = np.random.default_rng(1)
    height, width = 64, 96
    mask = rng.integers(0, 5, size=(height, width)).astype(np.uint8)
    image, moved = shuffle_with_mask(kind, position_image(height, width), mask, seed=7, cells=32)
    source_y, source_x = image[..., 0].astype(int), image[..., 1].astype(int)
    assert np.array_equal(moved, mask[source_y, source_x])  # every mask pixel came from where its image pixel came from
    assert not np.array_equal(moved, mask)


def test_voronoi_source_is_a_uniform_shift_per_cell():
    """Every Voronoi cell is filled from one shifted copy (Heinert et al. Fig. 2): within a cell, source minus
    target is one constant offset, and the shifted cell lies inside the image."""
    from stimuli.texture_cues import voronoi_cells

    source = voronoi_source(40, 50, 8, seed=3)
    labels = voronoi_cells(40, 50, 8, np.random.default_rng(3))
    yy, xx = np.mgrid[0:40, 0:50]
    dy, dx = source // 50 - yy, source % 50 - xx
    for k in range(8):
        assert len(set(zip(dy[labels == k], dx[labels == k]))) == 1


def confusion_rows(cells_by_trial: dict, observer="m", condition="original", level=None, params=None) -> list[dict]:
    return [{"observer": observer, "observer_kind": "model", "trial_id": trial, "trial_type": "segment",
             "condition": condition, "level": level, "params": json.dumps(params or {}),
             "model_outputs": json.dumps({"confusion": cells})} for trial, cells in cells_by_trial.items()]


@pytest.mark.validates("segmentation mIoU", definition="IoU_c = TP/(TP+FP+FN) over the confusion matrix accumulated "
                       "over images, ignore index left out; mIoU = mean over classes labelled or predicted",
                       source="Heinert et al. Sec. IV-B; Everingham et al. 2015", reference="hand computation",
                       tolerance="1e-12")
def test_miou_from_stored_confusion_cells_matches_hand_counts():
    from model_eval.decisions import confusion_triples

    # image 1 (3x3): truth rows [a a b], [a b b], [x x x] (x ignored); prediction [a b b], [a a b], [b b b]
    truth = np.array([[0, 0, 1], [0, 1, 1], [IGNORE] * 3], dtype=np.uint8)
    predicted = np.array([[0, 1, 1], [0, 0, 1], [1, 1, 1]])
    cells = confusion_triples(truth, predicted, ("a", "b"))
    assert sorted(map(tuple, cells)) == [("a", "a", 2), ("a", "b", 1), ("b", "a", 1), ("b", "b", 2)]
    # image 2: 4 pixels of b predicted as a class outside the label set, 1 of a as b
    image2 = [["b", "other", 4], ["a", "b", 1]]
    rows = pd.DataFrame(confusion_rows({"t1": cells, "t2": image2}))
    quality = segmentation.segmentation_quality(rows).iloc[0]
    # accumulated: a: TP 2, FN 1 + 1 = 2, FP 1 -> 2/5; b: TP 2, FN 1 + 4 = 5, FP 1 + 1 = 2 -> 2/9
    assert quality["mIoU"] == pytest.approx((2 / 5 + 2 / 9) / 2)
    assert (quality["images"], quality["pixels"]) == (2, 11)
    per_class = segmentation.class_iou(segmentation.confusion_cells(rows), ["observer"]).set_index("class")
    assert per_class.loc["b", "iou"] == pytest.approx(2 / 9) and "other" not in per_class.index
    # a class predicted but never labelled counts (IoU 0); one neither labelled nor predicted is left out
    rows = pd.DataFrame(confusion_rows({"t1": [["a", "a", 3], ["a", "c", 1]]}))
    assert segmentation.segmentation_quality(rows).iloc[0]["mIoU"] == pytest.approx((3 / 4 + 0) / 2)


# Heinert et al., appendix Table XIII: Q_O, Q_S, Q_T, S_cd, R_cd per model (Cityscapes; ADE20k where evaluated)
TABLE_XIII_CITYSCAPES = """
Mask2Former RN50 0.804 0.206 0.303 0.488 0.316
Mask2Former RN101 0.808 0.211 0.321 0.480 0.329
FCN RN101 0.752 0.205 0.381 0.430 0.390
FCN-d6 RN50 0.770 0.194 0.365 0.426 0.363
DeepLabV3Plus RN50 0.803 0.196 0.371 0.426 0.353
DeepLabV3Plus RN101 0.802 0.179 0.346 0.421 0.328
DeepLabV3Plus RN18 0.769 0.177 0.352 0.414 0.344
FCN RN18 0.702 0.176 0.366 0.403 0.386
PSPNet RN50 0.779 0.154 0.366 0.371 0.334
SETR ViT-L_mla 0.762 0.391 0.291 0.653 0.448
SETR ViT-L_pup 0.787 0.480 0.366 0.648 0.538
SETR ViT-L_naive 0.776 0.434 0.358 0.630 0.511
SegFormer MiT-b4 0.819 0.392 0.400 0.579 0.483
Mask2Former Swin-B 0.835 0.397 0.419 0.571 0.489
Mask2Former Swin-L 0.837 0.410 0.447 0.562 0.512
SegFormer MiT-b0 0.765 0.309 0.359 0.547 0.437
SegFormer MiT-b2 0.811 0.331 0.440 0.513 0.475
OCRNet hr18 0.779 0.172 0.283 0.461 0.292
DNL RN101 0.783 0.209 0.377 0.437 0.374
OCRNet hr48 0.807 0.154 0.307 0.413 0.286
OCRNet RN101 0.801 0.180 0.379 0.400 0.349
DNL RN50 0.786 0.157 0.417 0.346 0.365
"""
TABLE_XIII_ADE20K = """
Mask2Former RN50 0.466 0.208 0.102 0.513 0.333
Mask2Former RN101 0.467 0.207 0.100 0.515 0.329
FCN RN101 0.390 0.169 0.094 0.481 0.337
DeepLabV3Plus RN50 0.417 0.198 0.115 0.470 0.376
DeepLabV3Plus RN101 0.446 0.198 0.105 0.492 0.340
PSPNet RN50 0.410 0.188 0.119 0.447 0.374
FCN RN50 0.356 0.143 0.110 0.401 0.356
SETR ViT-L_mla 0.463 0.295 0.127 0.544 0.456
SETR ViT-L_pup 0.436 0.259 0.093 0.588 0.404
SETR ViT-L_naive 0.444 0.271 0.128 0.521 0.449
SegFormer MiT-b4 0.480 0.249 0.117 0.523 0.381
Mask2Former Swin-B 0.530 0.306 0.156 0.502 0.435
Mask2Former Swin-L 0.544 0.313 0.168 0.490 0.442
SegFormer MiT-b0 0.376 0.167 0.109 0.441 0.366
SegFormer MiT-b2 0.458 0.230 0.127 0.484 0.389
OCRNet hr18 0.389 0.195 0.070 0.591 0.340
DNL RN101 0.428 0.213 0.116 0.486 0.385
OCRNet hr48 0.426 0.220 0.083 0.576 0.356
DNL RN50 0.414 0.193 0.133 0.427 0.394
"""
TABLE_III_ROWS = ("Mask2Former RN101", "FCN RN101", "DeepLabV3Plus RN101", "PSPNet RN50", "SETR ViT-L_mla",
                  "SegFormer MiT-b4", "Mask2Former Swin-B", "OCRNet hr18", "DNL RN101")


def published(text: str) -> pd.DataFrame:
    rows = [line.rsplit(" ", 5) for line in text.strip().splitlines()]
    return pd.DataFrame([(name, *map(float, values)) for name, *values in rows],
                        columns=["observer", "Q_O", "Q_S", "Q_T", "S_cd", "R_cd"])


@pytest.mark.validates("segmentation S_cd and R_cd from mIoU", definition="s, t = model-set means of Q_S, Q_T; "
                       "S_cd = (Q_S/s)/(Q_S/s + Q_T/t); R_cd = (Q_S + Q_T)/(2 Q_O)",
                       source="Heinert et al. Eqs. 3-5, Tables III and XIII (Cityscapes, ADE20k)",
                       reference="published S_cd and R_cd recomputed from the published Q_O, Q_S, Q_T over all 22 "
                                 "Cityscapes and 19 ADE20k models", tolerance="0.0025 (components rounded to 3 places)")
def test_table_iii_and_xiii_from_their_published_components():
    for text in (TABLE_XIII_CITYSCAPES, TABLE_XIII_ADE20K):
        table = published(text)
        ours = metrics.cue_decomposition_scores(table[["observer", "Q_O", "Q_S", "Q_T"]].assign(observer_kind="model"))
        assert np.abs(ours["S_cd"] - table["S_cd"]).max() < 0.0025
        assert np.abs(ours["R_cd"] - table["R_cd"]).max() < 0.0025
        assert set(TABLE_III_ROWS) <= set(table["observer"])  # Table III's rows are these rows


@pytest.mark.validates("relative corruption robustness", definition="per corruption: mean over intensity levels "
                       "of Q(level)/Q_O, level 0 left out where it is the unchanged image (not uniform noise's); Mean "
                       "= mean over the corruptions", source="Heinert et al. Tables I, "
                       "IV, XIV", reference="hand computation; Table XIV's Mean from its five published columns",
                       tolerance="1e-12 (hand); 0.0011 (published, rounded)")
def test_relative_robustness_by_hand_and_table_xiv_mean():
    quality = pd.DataFrame([
        ("m", "original", None, 0.8), ("m", "contrast", 0, 0.8), ("m", "contrast", 1, 0.4), ("m", "contrast", 2, 0.2),
        ("m", "low_pass", 1, 0.6), ("m", "uniform_noise", 0, 0.4), ("m", "shape_cue", None, 0.1)],
        columns=["observer", "condition", "level", "mIoU"])
    out = metrics.relative_robustness(quality.assign(observer_kind="model"), "mIoU").iloc[0]
    # contrast: (0.4/0.8 + 0.2/0.8)/2 = 0.375 (level 0, the unchanged image, left out); low pass 0.75; uniform noise
    # 0.4/0.8 = 0.5 (its level 0 is a 30 %-contrast image: it counts); Mean (0.375 + 0.75 + 0.5)/3
    assert (out["contrast"], out["low_pass"], out["uniform_noise"], out["Mean"]) == (
        pytest.approx(0.375), pytest.approx(0.75), pytest.approx(0.5), pytest.approx(1.625 / 3))
    # classification: accuracy per level from scored trials (original 4/4, contrast level 1: 1/4, level 2: 3/4)
    scored = pd.DataFrame([("c", "model", "original", None, 1)] * 4 + [("c", "model", "contrast", 1, k) for k in
                                                                      (1, 0, 0, 0)]
                          + [("c", "model", "contrast", 2, k) for k in (1, 1, 1, 0)],
                          columns=["observer", "observer_kind", "condition", "level", "correct"])
    table = metrics.relative_robustness(metrics.accuracy(scored)).iloc[0]
    assert (table["contrast"], table["Mean"]) == (pytest.approx(0.5), pytest.approx(0.5))
    # Table XIV (Cityscapes): Cont., High Pass, Low Pass, Noise, Phase Noise, Mean
    for *columns, mean in ((0.741, 0.337, 0.445, 0.373, 0.257, 0.431), (0.920, 0.342, 0.644, 0.678, 0.355, 0.588),
                           (0.790, 0.203, 0.493, 0.434, 0.307, 0.445)):
        per_corruption = pd.DataFrame([("m", name, 1, value) for name, value in zip(metrics.HEINERT_CORRUPTIONS,
                                                                                      columns)] + [("m", "original",
                                                                                                    None, 1.0)],
                                      columns=["observer", "condition", "level", "accuracy"])
        ours = metrics.relative_robustness(per_corruption.assign(observer_kind="model")).iloc[0]["Mean"]
        assert abs(ours - mean) < 0.0011


@pytest.mark.validates("rank correlation of segmentation metrics with relative robustness",
                       definition="Spearman's rho over the models of each metric (mIoU, S_cd, R_cd) with each robustness "
                                  "column", source="Heinert et al. Tables V and VI", reference="hand-ranked values",
                       tolerance="1e-12")
def test_rank_correlations_lay_out_tables_v_and_vi():
    predictors = pd.DataFrame({"observer": ["a", "b", "c", "d"], "mIoU_EED": [0.1, 0.2, 0.3, 0.4],
                               "S_cd_Vor32": [0.9, 0.1, 0.5, np.nan]})
    robustness = pd.DataFrame({"observer": ["a", "b", "c", "d"], "observer_kind": "model",
                               "contrast": [0.4, 0.3, 0.2, 0.1], "Mean": [0.1, 0.3, 0.2, 0.4]})
    table = segmentation.rank_correlations(predictors, robustness).set_index("metric")
    # mIoU_EED ranks 1 2 3 4; contrast 4 3 2 1 -> -1; Mean ranks 1 3 2 4: 1 - 6 (0 + 1 + 1 + 0) / (4 * 15) = 0.8
    assert table.loc["mIoU_EED", "contrast"] == pytest.approx(-1) and table.loc["mIoU_EED", "Mean"] == pytest.approx(0.8)
    # S_cd over a, b, c only (d has none): ranks 3 1 2 vs Mean 1 3 2 -> 1 - 6 (4 + 4 + 0) / (3 * 8) = -1
    assert table.loc["S_cd_Vor32", "Mean"] == pytest.approx(-1) and table.loc["S_cd_Vor32", "models"] == 3


@pytest.mark.slow
def test_people_cannot_take_segmentation_trials(segmentation_study):
    from experiment_server.study import open_study

    experiment = ExperimentDir(segmentation_study / "exp").load()
    with pytest.raises(CuebenchError, match="people do not take 'segment' trials"):
        refuse_for_people(experiment, "cuebench lab run")
    with pytest.raises(CuebenchError, match="cuebench serve refuses"):
        open_study(segmentation_study / "exp")


def cuebench(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cuebench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, f"cuebench {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def segmentation_study(tmp_path_factory) -> Path:
    """docs/cue_decomposition.md's segmentation commands, run as written (few EED steps) from a fresh folder
    holding a generated labelled set and two TorchScript segmenters trained on one cue each."""
    work = tmp_path_factory.mktemp("segstudy")
    write_set(work / "shapes", photos=3)
    save_segmenter("texture", work / "texture.pt")
    save_segmenter("shape", work / "shape.pt")
    cuebench(work, "stimuli", "build", "--design", "seg-cue-decomposition", "--images", "shapes", "--convention",
             "generic", "--eed-steps", "64", "--voronoi-cells", "16,32", "--corruptions", "low_pass",
             "--out", "exp", "--workers", "1")
    cuebench(work, "eval", "--experiment", "exp", "--model", "segmenter:texture.pt", "--model", "segmenter:shape.pt",
             "--device", "cpu", "--quiet")
    cuebench(work, "report", "exp")
    return work


@pytest.mark.slow
def test_documented_commands_from_a_labelled_set_to_a_report(segmentation_study):
    expdir = ExperimentDir(segmentation_study / "exp")
    experiment = expdir.load()
    trials = [t for t in experiment.trials if t.source_image == "scene0"]
    assert [t.condition for t in trials][:4] == ["original", "shape_cue", "texture_cue", "texture_cue"]
    assert {t.trial_type for t in experiment.trials} == {"segment"} and len(trials) == 4 + 8  # + 8 low-pass levels
    original, shape, voronoi = trials[0], trials[1], trials[2]
    assert original.label_mask == shape.label_mask != voronoi.label_mask  # EED keeps the mask, the shuffle moves it
    # the stored texture cue and its mask are the stored original and mask moved by one Voronoi plan
    mask = read_mask_file(expdir.stimulus_path(experiment.stimuli[original.label_mask]))
    photo = decode_image(expdir.stimulus_path(experiment.stimuli[original.stimuli[0]]))
    stim = experiment.stimuli[voronoi.stimuli[0]]
    source = voronoi_source(64, 64, 16, stim.seed)
    assert np.array_equal(decode_image(expdir.stimulus_path(stim)), photo.reshape(-1, 3)[source].reshape(photo.shape))
    assert np.array_equal(read_mask_file(expdir.stimulus_path(experiment.stimuli[voronoi.label_mask])),
                          mask.ravel()[source].reshape(mask.shape))
    provenance = expdir.provenance(voronoi.label_mask)
    assert provenance["transform"] == "label_mask" and provenance["params"]["follows"] == "texture_cue"
    # the report's examples: the first photo's original, shape and (first) texture cue, each above its own mask
    panels = example_panels([segmentation_study / "absent", segmentation_study / "exp"])
    assert list(panels) == ["original", "shape_cue", "texture_cue"]
    for condition, trial in zip(panels, (original, shape, voronoi)):
        picture, labels = panels[condition]
        assert np.array_equal(picture, decode_image(expdir.stimulus_path(experiment.stimuli[trial.stimuli[0]])))
        assert np.array_equal(labels, read_mask_file(expdir.stimulus_path(experiment.stimuli[trial.label_mask])))
    figure = plots.label_mask_examples(panels)
    assert np.array_equal(figure.axes[3].images[0].get_array(), plots.palette()[mask])  # row 2, column 1

    tables = segmentation_study / "exp" / "reports" / "tables"
    cue = pd.read_csv(tables / "seg_cue_decomposition.csv")
    first = cue[cue["cells"] == 16].set_index("observer")
    texture, shape = (first.loc[first.index.str.startswith(f"segmenter:{k}")].iloc[0] for k in ("texture", "shape"))
    assert texture["Q_T"] > texture["Q_S"] + 0.2 and shape["Q_S"] > shape["Q_T"] + 0.1
    assert shape["S_cd"] > 0.5 > texture["S_cd"]
    assert {"low_pass", "Mean"} <= set(pd.read_csv(tables / "seg_relative_robustness.csv").columns)
    assert (segmentation_study / "exp" / "reports" / "figures" / "segmentation_examples.png").is_file()
    assert "Segmentation: cue decomposition" in (segmentation_study / "exp" / "reports" / "report.html").read_text()
    from cuebench_app.cli import main

    assert main(["analyze", str(segmentation_study / "exp"), "--correlate", "S_cd_Vor16", "mIoU_EED",
                 "--out", str(segmentation_study / "rho.csv")]) == 0
    assert pd.read_csv(segmentation_study / "rho.csv").iloc[0]["n"] == 2  # two models: too few to rank


@pytest.mark.slow
def test_torchvision_segmentation_checkpoint_whole_and_sliding_window(segmentation_study, tmp_path):
    """A torchvision architecture with random weights saved as a checkpoint, its classes in the sidecar; the
    sliding window covers every pixel once or more and answers like the whole image where windows span it."""
    import torch

    from model_eval.evaluate import evaluate_experiment
    from model_eval.observers import load_observer
    from model_eval.observers.segmentation import windows
    from model_eval.observers.torchvision_models import import_torchvision

    assert windows(64, 32, 24) == [0, 24, 32] and windows(20, 32, 8) == [0]
    torch.manual_seed(0)
    model = import_torchvision().models.get_model("lraspp_mobilenet_v3_large", weights=None, weights_backbone=None,
                                                  num_classes=len(CLASSES))
    path = tmp_path / "lraspp.pth"
    torch.save(model.state_dict(), path)
    path.with_suffix(".json").write_text(json.dumps({"classes": CLASSES}))
    whole = load_observer(f"lraspp_mobilenet_v3_large:{path}", "cpu")
    batch = torch.rand(2, 3, 64, 64)
    assert whole.outputs(batch, frozenset({"segmentation"}))["segmentation"].shape == (2, 64 * 64)
    path.with_suffix(".json").write_text(json.dumps({"classes": CLASSES, "window": [64, 64], "stride": [32, 32]}))
    slid = load_observer(f"lraspp_mobilenet_v3_large:{path}", "cpu")
    assert slid.provenance["inference"] == "sliding window 64x64, stride 32x32"
    assert torch.equal(slid.outputs(batch, frozenset({"segmentation"}))["segmentation"],
                       whole.outputs(batch, frozenset({"segmentation"}))["segmentation"])
    copy = tmp_path / "exp"
    subprocess.run(["cp", "-r", str(segmentation_study / "exp"), str(copy)], check=True)
    summary = evaluate_experiment(copy, [f"lraspp_mobilenet_v3_large:{path}"], device="cpu", progress=False)
    assert summary.runs[0].answered_now == len(ExperimentDir(copy).load().trials)


# IoU (true positives of 10 pixels, the rest predicted outside the label set) per observer, condition, class a / b
CLASS_IOU = {"m1": {"original": (9, 8), "shape_cue": (6, 2), ("texture_cue", 16): (3, 5), ("texture_cue", 32): (1, 4)},
             "m2": {"original": (8, 9), "shape_cue": (2, 4), ("texture_cue", 16): (5, 5), ("texture_cue", 32): (6, 1)}}


def class_cue_rows() -> pd.DataFrame:
    rows = []
    for observer, arms in CLASS_IOU.items():
        for arm, (tp_a, tp_b) in arms.items():
            condition, cells = arm if isinstance(arm, tuple) else (arm, None)
            level = {16: 0, 32: 1}.get(cells)
            confusion = [["a", "a", tp_a], ["a", "other", 10 - tp_a], ["b", "b", tp_b], ["b", "other", 10 - tp_b]]
            rows += [{**row, "model_outputs": json.dumps({"confusion": confusion, "confusion_near_edges": confusion})}
                     for row in confusion_rows({f"{observer}-{condition}-{cells}": confusion}, observer, condition,
                                               level, {"cells": cells} if cells else None)]
    return pd.DataFrame(rows).assign(response="label map", role="test")


@pytest.mark.validates("per-class segmentation S_cd and R_cd",
                       definition="a class's IoU in place of mIoU in Eqs. 3-5, s and t the model set's means for the "
                                  "class, one block per texture-cue level of a sweep; the only model of a one-model "
                                  "set gets no S_cd (0.5 by construction)",
                       source="Heinert et al. Eqs. 3-5 (per class: beyond the paper)",
                       reference="hand computation on two models, two classes, a two-level Voronoi sweep",
                       tolerance="1e-12")
def test_per_class_s_cd_names_each_voronoi_level_and_leaves_out_a_lone_model(tmp_path):
    from support import cuebench_in_process

    class_cue_rows().to_csv(tmp_path / "responses.csv", index=False)
    cuebench_in_process(tmp_path, "analyze", "responses.csv", "--metric", "segmentation-class-cues",
                        "--out", "classes.csv")
    table = pd.read_csv(tmp_path / "classes.csv").set_index(["observer", "cells", "class"])
    assert sorted(set(zip(table.reset_index()["texture_level"], table.reset_index()["cells"]))) == [(0, 16), (1, 32)]
    for cells in (16, 32):
        for k, name in enumerate("ab"):
            q = {o: {c: arms[c if c != "texture_cue" else ("texture_cue", cells)][k] / 10
                     for c in ("original", "shape_cue", "texture_cue")} for o, arms in CLASS_IOU.items()}
            s = (q["m1"]["shape_cue"] + q["m2"]["shape_cue"]) / 2
            t = (q["m1"]["texture_cue"] + q["m2"]["texture_cue"]) / 2
            for observer, v in q.items():
                row = table.loc[(observer, cells, name)]
                shape, texture = v["shape_cue"] / s, v["texture_cue"] / t
                assert row["S_cd"] == pytest.approx(shape / (shape + texture), abs=1e-12)
                assert row["R_cd"] == pytest.approx((v["shape_cue"] + v["texture_cue"]) / (2 * v["original"]))
    cuebench_in_process(tmp_path, "analyze", "responses.csv", "--metric", "segmentation-class-cues",
                        "--model-set", "m1", "--out", "lone.csv")
    lone = pd.read_csv(tmp_path / "lone.csv").set_index(["observer", "cells", "class"])
    assert lone.loc[("m1", 16, "a"), "S_cd"] != lone.loc[("m1", 16, "a"), "S_cd"]  # empty, not 0.5
    assert "S_cd = 0.5 by construction" in lone.loc[("m1", 16, "a"), "note"]
    # m2 is still compared with m1: (0.2 / 0.6) / (0.2 / 0.6 + 0.5 / 0.3) for class a at 16 sites
    assert lone.loc[("m2", 16, "a"), "S_cd"] == pytest.approx((0.2 / 0.6) / (0.2 / 0.6 + 0.5 / 0.3))
    assert lone.loc[("m1", 32, "b"), "R_cd"] == pytest.approx((0.2 + 0.4) / (2 * 0.8))


def test_the_edge_band_is_three_pixels_deep_on_each_side_of_a_label_change():
    from model_eval.decisions import near_edges

    mask = np.zeros((1, 12), dtype=np.uint8)
    mask[0, 6:] = 1
    assert near_edges(mask)[0].astype(int).tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    rim = np.zeros((9, 9), dtype=np.uint8)
    rim[4, 4] = IGNORE  # an ignored pixel's rim is an edge; the image border is none
    band = near_edges(rim)
    assert band[4, 1] and band[4, 7] and not band[4, 0] and not band[0, 4] and not band[1, 1] and band[2, 1]
