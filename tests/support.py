"""Real inputs the tests share (the fixtures live in conftest.py).

- a cut of the DiST release in its own layout (``dist_subset``);
- a plug-in package installed only by being on PYTHONPATH (``plugin_package``: its dist-info names the
  entry points);
- the docs' one-file observer (``observer_example``), three classes of DiST photos (``three_class_photos``),
  a command run in this process (``cuebench_in_process``: spares a torch start-up per command);
- a built study's texts filled in as a researcher does before serving (``fill_consent``);
- a participant's and the admin's requests to a Flask test client (``start``, ``plan``, ``login``, ...), and an
  injectable ``Clock`` for the app, so reservations lapse when a test says so;
- a labelled segmentation set and two tiny segmenters trained on it in seconds:

The set: 64 x 64 photos of a disk and a square on a background, each region with its own
luminance and its own fine texture (background: horizontal stripes, disk: a checkerboard,
square: vertical stripes), exact masks, and a one-pixel ignored frame. The two segmenters see
one cue each through a fixed front end and learn only a per-pixel linear head:

- ``texture``: local mean of |horizontal| and |vertical| differences, each capped at a texture's
  contrast (blind to luminance and region edges): it reads the stripes and checks, which Voronoi
  shuffling keeps and EED removes;
- ``shape``: the luminance blurred with a wide Gaussian, on the image's own range: it reads the
  large uniform regions that EED keeps, and is misled where Voronoi cells of different regions lie
  side by side.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from experiment_server.simulate import fill_consent  # noqa: F401  (the tests' one way to fill a study's texts)

REPO = Path(__file__).resolve().parents[1]
ADMIN_PASSWORD = "correct horse battery"
"""The admin password the server tests set."""

CLASSES = ["background", "disk", "square"]
LUMINANCE = (70, 190, 130)
SIZE = 64
TEXTURE_CONTRAST = 3
"""Grey levels of the textures: faint enough that a few EED steps diffuse them away (EED keeps every
contrast its pre-smoothed gradient still shows, Heinert et al.'s lambda = 1/15 on 0-255 values)."""


def texture(kind: int, size: int = SIZE) -> np.ndarray:
    """+-1 pattern of period 4: 0 horizontal stripes, 1 checkerboard, 2 vertical stripes."""
    yy, xx = np.mgrid[0:size, 0:size]
    rows, cols = (yy // 2) % 2, (xx // 2) % 2
    pattern = (rows, rows ^ cols, cols)[kind]
    return pattern * 2.0 - 1.0


def labelled_photo(rng: np.random.Generator, size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """One photo and its exact class mask (IGNORE on the outer frame)."""
    yy, xx = np.mgrid[0:size, 0:size]
    mask = np.zeros((size, size), dtype=np.uint8)
    cy, cx, r = rng.integers(16, 28), rng.integers(14, 50), rng.integers(8, 12)
    mask[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = 1
    top, left, side = rng.integers(34, 44), rng.integers(6, 40), rng.integers(14, 20)
    mask[top:top + side, left:left + side] = 2
    lum = np.choose(mask, LUMINANCE).astype(float)
    tex = np.choose(mask, [texture(k, size) for k in range(3)])
    grey = np.clip(lum + TEXTURE_CONTRAST * tex + rng.normal(0, 0.5, mask.shape), 0, 255)
    photo = np.repeat(grey[..., None], 3, axis=-1).astype(np.uint8)
    mask[0, :] = mask[-1, :] = mask[:, 0] = mask[:, -1] = 255
    return photo, mask


def write_set(root: Path, photos: int = 3, seed: int = 0) -> Path:
    """A generic-convention set folder: images/, labels/ and classes.json."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for k in range(photos):
        photo, mask = labelled_photo(rng)
        Image.fromarray(photo).save(root / "images" / f"scene{k}.png")
        Image.fromarray(mask, mode="L").save(root / "labels" / f"scene{k}.png")
    (root / "classes.json").write_text(json.dumps({"classes": CLASSES, "ignore_index": 255}))
    return root


def tiny_segmenter(kind: str, seed: int = 0):
    """A TorchScript-able module: a fixed one-cue front end and a 1 x 1 convolution trained on 8 fresh photos."""
    import torch
    import torch.nn.functional as F

    class CueSegmenter(torch.nn.Module):
        def __init__(self, shape: bool):
            super().__init__()
            self.shape = shape
            radius = 9 if shape else 2
            x = torch.arange(-radius, radius + 1, dtype=torch.float32)
            g = torch.exp(-x ** 2 / (2 * (radius / 2.5) ** 2))
            self.register_buffer("blur", (g / g.sum()).view(1, 1, 1, -1))
            self.radius = radius
            self.head = torch.nn.Conv2d(2, 3, 1)

        def smooth(self, x):
            r, c = self.radius, x.shape[1]
            row = self.blur.expand(c, 1, 1, 2 * r + 1)
            x = F.conv2d(F.pad(x, (r, r, 0, 0), mode="replicate"), row, groups=c)
            return F.conv2d(F.pad(x, (0, 0, r, r), mode="replicate"), row.transpose(2, 3), groups=c)

        def features(self, x):
            grey = x.mean(dim=1, keepdim=True)
            if self.shape:  # the blurred luminance on the image's own range (EED images are saved stretched)
                blurred = self.smooth(grey)
                low = blurred.amin(dim=(2, 3), keepdim=True)
                high = blurred.amax(dim=(2, 3), keepdim=True)
                level = ((blurred - low) / (high - low + 1e-6) - 0.5) * 4
                return torch.cat([level, level * level], dim=1)
            dx = F.pad((grey[..., :, 1:] - grey[..., :, :-1]).abs(), (0, 1, 0, 0), mode="replicate")
            dy = F.pad((grey[..., 1:, :] - grey[..., :-1, :]).abs(), (0, 0, 0, 1), mode="replicate")
            steps = torch.cat([dx, dy], dim=1).clamp(max=8 / 255)  # a texture's contrast, not a region edge's
            return torch.log1p(self.smooth(steps) * 255)

        def forward(self, x):
            return self.head(self.features(x))

    torch.manual_seed(seed)
    model = CueSegmenter(kind == "shape")
    rng = np.random.default_rng(seed + 100)
    pairs = [labelled_photo(rng) for _ in range(8)]
    x = torch.tensor(np.stack([p for p, _ in pairs]), dtype=torch.float32).permute(0, 3, 1, 2) / 255.0
    y = torch.tensor(np.stack([m for _, m in pairs]), dtype=torch.long)
    optimiser = torch.optim.Adam(model.head.parameters(), lr=0.1)
    features = model.features(x).detach()
    weights = 1 / torch.bincount(y[y < 255], minlength=3).float()  # balanced: the background is most pixels
    for _ in range(300):
        optimiser.zero_grad()
        loss = F.cross_entropy(model.head(features), y, weight=weights, ignore_index=255)
        loss.backward()
        optimiser.step()
    return model.eval()


def save_segmenter(kind: str, path: Path) -> Path:
    """The tiny segmenter as a TorchScript file with its sidecar (classes; inputs on [0, 1])."""
    import torch

    torch.jit.save(torch.jit.script(tiny_segmenter(kind)), str(path))
    path.with_suffix(".json").write_text(json.dumps({"classes": CLASSES, "mean": [0, 0, 0], "std": [1, 1, 1]}))
    return path

def dist_subset(release: Path, subset: Path, photos: int, skip: int = 0) -> Path:
    """``photos`` originals of the DiST release after the first ``skip``: every folder (original, set1, set2)
    and labels.csv cut to the same photos, so the importer reads the release's own layout."""
    keep = sorted(path.name for path in (release / "original").iterdir())[skip:skip + photos]
    for folder in sorted(path for path in release.iterdir() if path.is_dir()):
        (subset / folder.name).mkdir(parents=True)
        for name in keep:
            shutil.copy(folder / name, subset / folder.name / name)
    stems = {Path(name).stem for name in keep}
    header, *rows = (release / "labels.csv").read_text().splitlines()
    (subset / "labels.csv").write_text("\n".join([header, *(row for row in rows if row.split(",")[0] in stems)]) + "\n")
    return subset


def check_photo_folder(root: Path, classes: dict[str, tuple[str, ...]]) -> Path:
    """A ``--check-images`` folder: bundled photos (class folder -> their names) mirrored, so that each shows its
    class and none has the pixels of a study photo."""
    from PIL import Image

    from stimuli.sources import default_images

    bundled = {image.name: image for image in default_images()}
    for category, names in classes.items():
        (root / category).mkdir(parents=True, exist_ok=True)
        for name in names:
            Image.fromarray(bundled[name].read()[:, ::-1]).save(root / category / f"{name}-mirrored.png")
    return root


def plugin_package(root: Path, name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str]) -> Path:
    """``root`` holding the modules (file name -> code) and ``NAME-1.0.dist-info`` whose
    entry_points.txt lists ``group -> {entry name: "module:attr"}``; put ``root`` on PYTHONPATH."""
    dist = root / f"{name.replace('-', '_')}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{entry} = {target}\n" for entry, target in entries.items())
        for group, entries in entry_points.items()))
    for filename, code in modules.items():
        (root / filename).write_text(code)
    return root


def observer_example() -> str:
    """The one-file observer of docs/models.md ("Adding an observer"), so the docs run as written."""
    text = (REPO / "docs" / "models.md").read_text(encoding="utf-8").split("<!-- observer-example -->", 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def three_class_photos(shared, folder, per_class: int = 4):
    """DiST originals of two bird classes and the wine bottle (``per_class`` each) with labels.csv:
    classes of two 16-class categories, so that cue-conflict trials exist for them."""
    rows = [row for row in csv.DictReader((shared / "data" / "dist" / "labels.csv").open(encoding="utf-8"))]
    folder.mkdir()
    chosen = [(row["image"], row["imagenet_index"]) for index in ("87", "82", "907")
              for row in [r for r in rows if r["imagenet_index"] == index][:per_class]]
    for image, _ in chosen:
        (folder / f"{image}.jpg").symlink_to(shared / "data" / "dist" / "original" / f"{image}.jpg")
    with (folder / "labels.csv").open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([("image", "imagenet_index"), *chosen])
    return folder


def cuebench_in_process(cwd: Path, *args: str) -> str:
    """``cuebench ARGS`` run in ``cwd`` as the command line runs it (in this process, to spare a start-up of
    torch per command); its printed output."""
    from cuebench_app.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.chdir(cwd)
        assert main(list(args)) == 0
    return out.getvalue()


# ------------------------------------------- a participant's and the admin's requests to a test client


class Clock:
    """An injectable clock for ``create_app(clock=...)``: reservations lapse when the test says so, not after
    real waiting."""

    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def consent_nonce(client) -> str:
    """The start form's nonce from the consent page (it also gives the client its browser cookie)."""
    from experiment_server.simulate import NONCE

    return NONCE.search(client.get("/").get_data(as_text=True)).group(1)


def start(client, **params) -> str:
    response = client.post("/start", data={"consent": "yes", "start_nonce": consent_nonce(client), **params})
    assert response.status_code == 303, response.data
    return response.headers["Location"].rsplit("/", 1)[1]


def plan(client, token) -> dict:
    response = client.get(f"/api/session/{token}")
    assert response.status_code == 200
    return response.get_json()


def login(client) -> None:
    page = client.get("/admin/login")
    token = page.get_data(as_text=True).split('name="csrf_token" value="')[1].split('"')[0]
    r = client.post("/admin/login", data={"password": ADMIN_PASSWORD, "csrf_token": token})
    assert r.status_code == 302, r.data


# ------------------------------------------- answers that reach the web server's group commit as one batch


def first_answer(study, person, **fields) -> dict:
    """The row the web server stores for ``person``'s answer to their first trial (its first choice, at 500 ms)."""
    from cuebench.responses import trial_row

    trial = study.experiment.trial(study.sequence(person)[0].trial_id)
    return trial_row(study.experiment, trial, **{
        "observer": person.code, "observer_kind": "human", "session": "1", "trial_index": 0,
        "response": trial.choices[0], "group": person.group, "rt_ms": 500.0, "timed_out": 0, "timing_measured": {},
        "frames": {}, "dropped_frames": 0, "refresh_hz": 60.0, "device": {}, "events": [], **fields})


def commit_as_one_batch(commit, rows: dict[str, dict], while_waiting=lambda: None) -> dict[str, object]:
    """Each row (session code -> row) written to the group commit by a thread of its own, all queued before its
    first turn (the commit lock is held until they are), so that they commit as one batch; ``while_waiting`` runs
    while they wait. What ``write`` returned or raised, per code."""
    outcomes: dict[str, object] = {}

    def write(code):
        try:
            outcomes[code] = commit.write(rows[code], code)
        except Exception as err:  # noqa: BLE001 - the outcome under test
            outcomes[code] = err

    threads = [threading.Thread(target=write, args=(code,), daemon=True) for code in rows]
    with commit._commit_lock:
        for thread in threads:
            thread.start()
        while len(commit._queue) < len(threads):
            threading.Event().wait(0.01)
        while_waiting()
    for thread in threads:
        thread.join(timeout=60)
    assert not [t for t in threads if t.is_alive()], "a writer of the batch still waits after 60 s"
    return outcomes
