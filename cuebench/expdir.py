"""The experiment directory: experiment.json, content-addressed stimuli/, the provenance
manifest, responses.sqlite, reports/.

A folder anyone can copy (DESIGN.md, "Experiment directory"). Stimulus file names are
a hash of the pixels and the provenance, so the same inputs and seed give the same
names and bytes, and a re-run can skip what exists. The provenance of each stimulus is a
record in ``provenance/<id>.json``, beside the images and never inside them: the files a
participant receives carry pixels only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from .version import __version__
from .errors import CuebenchError
from .paths import user_path
from .trials import Experiment, Stimulus

EXPERIMENT_FILE = "experiment.json"
STIMULI_DIR = "stimuli"
PROVENANCE_DIR = "provenance"
SHARDS_DIR = ".shards"
"""Work records of executor shards (stimuli, evaluations) until the build or run that used them ends."""
RESPONSES_FILE = "responses.sqlite"
REPORTS_DIR = "reports"
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class OutsideExperimentError(CuebenchError):
    """A stimulus file that is, or links to, a file outside the experiment directory."""


def canonical_json(data) -> str:
    """JSON with sorted keys and no whitespace: equal content gives equal text (and hash)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def provenance_key(provenance: dict) -> str:
    """Hash of a stimulus' provenance alone, to find an already-built stimulus before making it."""
    return hashlib.sha256(canonical_json(provenance).encode()).hexdigest()[:20]


def stimulus_id(pixels: np.ndarray, provenance: dict) -> str:
    """Content address: hash of the pixel array (shape, dtype, bytes) and the provenance."""
    h = hashlib.sha256()
    h.update(f"{pixels.shape}{pixels.dtype}".encode())
    h.update(np.ascontiguousarray(pixels).tobytes())
    h.update(canonical_json(provenance).encode())
    return h.hexdigest()[:20]


def encode_png(pixels: np.ndarray) -> bytes:
    """Lossless, deterministic PNG holding the pixels and nothing else (one grey channel for a label mask).

    OpenCV's encoder is about 7x faster than Pillow's at its default level, which makes
    encoding no longer the bottleneck of a build.
    """
    if pixels.dtype != np.uint8 or not (pixels.ndim == 2 or pixels.ndim == 3 and pixels.shape[2] == 3):
        raise ValueError(f"stimulus pixels must be HxWx3 uint8 (or HxW, a label mask), got {pixels.dtype} "
                         f"{pixels.shape}")
    ok, encoded = cv2.imencode(".png", np.ascontiguousarray(pixels if pixels.ndim == 2 else pixels[..., ::-1]))
    if not ok:
        raise ValueError("PNG encoding failed")
    return encoded.tobytes()


_PRIVATE_WRITES: ContextVar[bool] = ContextVar("private_writes", default=False)


@contextmanager
def private_files() -> Iterator[None]:
    """Within it, ``atomic_write`` makes files only their owner can read (0600): exports of
    participants' data, like the database they come from."""
    token = _PRIVATE_WRITES.set(True)
    try:
        yield
    finally:
        _PRIVATE_WRITES.reset(token)


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if not _PRIVATE_WRITES.get():  # mkstemp makes 0600; a written file gets the usual mode
            os.chmod(tmp, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ExperimentDir:
    """Paths and atomic reads/writes of one experiment folder (its root always absolute)."""

    def __init__(self, root: str | Path):
        self.root = user_path(root)

    @property
    def experiment_file(self) -> Path:
        return self.root / EXPERIMENT_FILE

    @property
    def stimuli_dir(self) -> Path:
        return self.root / STIMULI_DIR

    @property
    def provenance_dir(self) -> Path:
        return self.root / PROVENANCE_DIR

    @property
    def shards_dir(self) -> Path:
        return self.root / SHARDS_DIR

    def clear_shards(self) -> None:
        """Remove the shards' records once experiment.json or the responses hold what they made."""
        shutil.rmtree(self.shards_dir, ignore_errors=True)

    @property
    def responses_file(self) -> Path:
        return self.root / RESPONSES_FILE

    @property
    def reports_dir(self) -> Path:
        return self.root / REPORTS_DIR

    def exists(self) -> bool:
        return self.experiment_file.is_file()

    def load(self) -> Experiment:
        return Experiment.load(self.experiment_file)

    def save(self, experiment: Experiment) -> None:
        atomic_write(self.experiment_file, experiment.to_json().encode("utf-8"))

    def stimulus_path(self, stimulus: Stimulus) -> Path:
        return self.stimulus_file(stimulus.path.split("/", 1)[1])

    def stimulus_paths(self, stimuli: dict[str, Stimulus]) -> dict[str, Path]:
        """``id -> file`` for many stimuli with ``stimulus_file``'s check, each folder resolved once per call:
        one ``lstat`` per file instead of one per path component (an evaluation of thousands of stimuli
        otherwise spends longer here than in a GPU's forward passes). A file that is itself a link gets
        the full check."""
        root = self.root.resolve()
        folders: dict[Path, bool] = {}
        paths = {}
        for sid, stimulus in stimuli.items():
            name = stimulus.path.split("/", 1)[1]
            path = self.stimuli_dir / name
            if path.parent not in folders:
                folders[path.parent] = path.parent.resolve().is_relative_to(root)
            if not folders[path.parent] or ".." in Path(name).parts or os.path.islink(path):
                path = self.stimulus_file(name)  # raises, naming where it leads, or passes a link that stays inside
            paths[sid] = path
        return paths

    def stimulus_file(self, name: str) -> Path:
        """The file ``stimuli/<name>``, refused when it (or a symlink on the way) leads out of the experiment."""
        path = self.stimuli_dir / name
        resolved = path.resolve()
        if not resolved.is_relative_to(self.root.resolve()) or ".." in Path(name).parts:
            raise OutsideExperimentError(f"{path} leads outside the experiment directory {self.root} "
                                         f"(to {resolved}); stimuli must be files inside it")
        return path

    def provenance(self, stimulus_id: str) -> dict:
        """The full provenance record of a stimulus: exactly what its id hashes besides the pixels."""
        path = self.provenance_dir / f"{stimulus_id}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CuebenchError(f"{path} is missing: stimulus {stimulus_id} was built before provenance "
                                "moved out of the image files (rebuild the folder to record it)") from None

    def write_stimulus(self, pixels: np.ndarray, provenance: dict) -> Stimulus:
        """Store an image array as a content-addressed PNG, its provenance in the manifest, and return its record."""
        sid = stimulus_id(pixels, provenance)
        rel = f"{STIMULI_DIR}/{sid}.png"
        self._record_provenance(sid, provenance)
        target = self.root / rel
        if not target.exists():
            atomic_write(target, encode_png(pixels))
        return make_stimulus(sid, rel, pixels.shape, provenance)

    def _record_provenance(self, sid: str, provenance: dict) -> None:
        """One record per stimulus, written before the image so an image on disk always has one."""
        record = self.provenance_dir / f"{sid}.json"
        if not record.exists():
            atomic_write(record, canonical_json(provenance).encode("utf-8"))

    def write_stimulus_bytes(self, data: bytes, suffix: str, pixels: np.ndarray, provenance: dict) -> Stimulus:
        """Store an already-encoded file (e.g. an imported JPEG) unchanged, addressed by its decoded pixels."""
        sid = stimulus_id(pixels, provenance)
        rel = f"{STIMULI_DIR}/{sid}{suffix.lower()}"
        self._record_provenance(sid, provenance)
        target = self.root / rel
        if not target.exists():
            atomic_write(target, data)
        return make_stimulus(sid, rel, pixels.shape, provenance)


def make_stimulus(sid: str, rel: str, shape: tuple, provenance: dict) -> Stimulus:
    return Stimulus(
        id=sid,
        path=rel,
        source_image=provenance.get("source_image"),
        transform=provenance.get("transform", "original"),
        params=provenance.get("params", {}),
        seed=provenance.get("seed"),
        software_version=provenance.get("software_version", __version__),
        width=int(shape[1]),
        height=int(shape[0]),
    )
