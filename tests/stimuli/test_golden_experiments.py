"""The experiment.json of two cheap designs, built from two bundled photos, stays byte for byte what it was.

Builds are deterministic (same inputs and seed, same bytes): a change to a design, a transform, the
schema or its serialisation that alters an experiment shows up here as a diff of a file a reviewer can
read, not as a silent change of collected studies' stimuli. What the build records about the machine is
normalised: the versions of Python, numpy, Pillow and OpenCV in ``provenance.software``, and the
cuebench version, which every stimulus records and its id hashes, is pinned to ``golden``.

The transforms are exact (a channel permutation; contrast and uniform noise are elementwise arithmetic
on scikit-image's grayscale and numpy's seeded generator), so the files hold on any machine.

When a change is intended, regenerate and review the diff before committing it:

    PYTHONPATH=. .venv/bin/python tests/stimuli/test_golden_experiments.py
    git diff tests/data/golden/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PIL import Image

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
BUILDS = {
    "suppression": ["--design", "suppression", "--conditions", "channel_shuffle"],
    "corruptions": ["--design", "corruptions", "--corruptions", "contrast,uniform_noise"],
}
PHOTOS = {"cat": "chelsea", "coffee": "coffee"}
PINNED_VERSION = "golden"
MACHINE = {"normalised": "the versions of Python, numpy, Pillow and OpenCV of the machine that built it"}


def built_experiment_json(design: str, root: Path) -> str:
    """``cuebench stimuli build`` of ``design`` on two bundled photos in ``root``, as the golden file holds it."""
    import stimuli.build
    from cuebench_app.cli import main
    from stimuli.sources import default_images, fit_to_stimulus

    bundled = {image.name: image for image in default_images()}
    for category, name in PHOTOS.items():
        (root / "photos" / category).mkdir(parents=True, exist_ok=True)
        Image.fromarray(fit_to_stimulus(bundled[name].read())).save(root / "photos" / category / f"{name}.png")
    argv = ["stimuli", "build", "--out", "exp", "--images", "photos", "--workers", "1", *BUILDS[design]]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setattr(sys, "argv", ["cuebench", *argv])  # the command provenance records
        patch.setattr(stimuli.build, "__version__", PINNED_VERSION)  # in-process: --workers 1
        assert main(argv) == 0
    written = (root / "exp" / "experiment.json").read_text(encoding="utf-8")
    data = json.loads(written)
    assert json.dumps(data, indent=1, ensure_ascii=False) + "\n" == written  # normalising changes nothing else
    data["provenance"]["software"] = MACHINE
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("design", BUILDS)
def test_experiment_json_is_byte_identical_to_the_golden_file(design, tmp_path):
    golden = (GOLDEN / f"{design}-experiment.json").read_text(encoding="utf-8")
    assert built_experiment_json(design, tmp_path) == golden, \
        f"{design}'s experiment.json changed; if intended, regenerate: see this module's docstring"


if __name__ == "__main__":
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in BUILDS:
        with tempfile.TemporaryDirectory() as folder:
            (GOLDEN / f"{name}-experiment.json").write_text(built_experiment_json(name, Path(folder)), encoding="utf-8")
            print(f"wrote {GOLDEN / f'{name}-experiment.json'}")
