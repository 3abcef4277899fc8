"""Decode once, evaluate many: an experiment's stimuli as uint8 pixel arrays beside it.

Decoding PNG/JPEG files with Pillow costs more than a small model's forward pass on a GPU,
and a zoo evaluation would decode the same files again for every model. The first
evaluation decodes each stimulus it needs into ``cache/decoded/`` of the experiment
directory: one ``.npy`` array per image size (N x H x W x 3 uint8, memory-mapped when
read) and ``index.json``, which maps each stimulus id to its array and row together with
the size and modification time of the file it was decoded from. Later runs and other
models read the arrays; a new stimulus, or one whose file changed, is decoded and its
array rewritten. The pixels are the decoded files unchanged, so one cache serves every
model and preprocessing policy: resizing, cropping and normalising run on the model's
device (``preprocess.DevicePreprocess``).

Array files are named by a hash of their entries (content-addressed), written under a
temporary name, fsynced and renamed; the index is replaced atomically after them, so a
reader never sees half a cache. A file lock makes processes that need the cache at the
same time take turns: the second finds the first one's work done. The cache is derived
data: deleting ``cache/`` only costs the next run a decode.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cuebench.expdir import ExperimentDir, atomic_write, canonical_json
from cuebench.images import CorruptImageError, decode_image

CACHE_DIR = Path("cache") / "decoded"
INDEX_FILE = "index.json"
LOCK_FILE = ".lock"
FORMAT = 1
"""Bump when the layout or the decoder's output changes: an index of another format is rebuilt."""


@dataclass(frozen=True)
class Entry:
    """Where a stimulus' pixels are, and the file state they were decoded from."""

    array: str
    row: int
    size: int
    mtime_ns: int

    def matches(self, stat: os.stat_result) -> bool:
        return (self.size, self.mtime_ns) == (stat.st_size, stat.st_mtime_ns)


class DecodedStimuli:
    """Read-only decoded pixels: stimulus id -> (H, W, 3) uint8, gathered a batch at a time."""

    def __init__(self, arrays: dict[str, np.ndarray], entries: dict[Hashable, Entry]):
        self.arrays = arrays
        self.entries = entries

    @classmethod
    def joined(cls, parts: list[DecodedStimuli]) -> DecodedStimuli:
        """Several experiments' decoded stimuli as one, stimulus ``sid`` of ``parts[k]`` under the key
        ``(k, sid)``: a batch can then hold images of several experiments (of one size)."""
        arrays = {f"{k}/{name}": array for k, part in enumerate(parts) for name, array in part.arrays.items()}
        entries = {(k, sid): replace(entry, array=f"{k}/{entry.array}")
                   for k, part in enumerate(parts) for sid, entry in part.entries.items()}
        return cls(arrays, entries)

    def shape(self, sid: Hashable) -> tuple[int, int]:
        return tuple(self.arrays[self.entries[sid].array].shape[1:3])

    def gather(self, ids: list[Hashable], out: np.ndarray | None = None) -> np.ndarray:
        """The pixels of ``ids`` (all of one size) as one (n, H, W, 3) array, into ``out`` if given
        (e.g. pinned memory for an asynchronous copy to a GPU)."""
        names = [self.entries[sid].array for sid in ids]
        rows = np.fromiter((self.entries[sid].row for sid in ids), dtype=np.intp, count=len(ids))
        if len(set(names)) == 1:  # one experiment's images of one size: one array
            if out is None:
                return np.take(self.arrays[names[0]], rows, axis=0)
            return np.take(self.arrays[names[0]], rows, axis=0, out=out[:len(ids)], mode="clip")  # "raise" copies twice
        batch = np.empty((len(ids), *self.shape(ids[0]), 3), dtype=np.uint8) if out is None else out[:len(ids)]
        names = np.array(names)
        for name in dict.fromkeys(names):
            at = np.flatnonzero(names == name)
            batch[at] = np.take(self.arrays[name], rows[at], axis=0)
        return batch


PROCESS_DECODING_FROM = 256
"""Images to decode before decoding processes pay for their start on a CPU (about 10 ms a PNG each, against a
fraction of a second to start them)."""


def decoding_workers(requested: int | None, device: str, images: int) -> int:
    """Processes that decode ``images`` new stimuli (``requested``, else a default). The cache is filled before
    the model runs, so decoding takes no core from it: on a GPU machine up to 4, leaving the model's host
    thread one; on a CPU up to 4 of its cores, once there are enough images to pay for starting them (else
    threads of this process decode, ``_in_threads``)."""
    if requested is not None:
        return requested
    cores = _cores()
    if device.startswith("cuda"):
        return max(1, min(4, cores - 1))
    return min(4, cores) if cores > 1 and images >= PROCESS_DECODING_FROM else 0


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cache_dir(expdir: ExperimentDir) -> Path:
    return expdir.root / CACHE_DIR


def decoded_stimuli(expdir: ExperimentDir, stimulus_paths: dict[str, Path], workers: int | None = 0,
                    progress: bool = True, device: str = "cpu") -> DecodedStimuli:
    """The decoded pixels of the stimuli ``id -> file``; those not cached yet (or whose file
    changed since) are decoded first, by ``workers`` processes (0: threads of this one; None:
    ``decoding_workers`` for ``device``)."""
    from filelock import FileLock

    root = cache_dir(expdir)
    root.mkdir(parents=True, exist_ok=True)
    stats = {sid: _stat(sid, path) for sid, path in stimulus_paths.items()}
    with FileLock(str(root / LOCK_FILE)):
        entries = read_index(root)
        stale = [sid for sid in stimulus_paths if sid not in entries or not entries[sid].matches(stats[sid])]
        if stale:
            entries = _extend(root, entries, {sid: stimulus_paths[sid] for sid in stale}, stats,
                              decoding_workers(workers, device, len(stale)), progress)
        # opened under the lock: a later rebuild may delete these files, but not the open maps
        arrays = {name: np.load(root / name, mmap_mode="r")
                  for name in {entries[sid].array for sid in stimulus_paths}}
    return DecodedStimuli(arrays, {sid: entries[sid] for sid in stimulus_paths})


def read_index(root: Path) -> dict[str, Entry]:
    """The cache's entries; an unreadable index or one of another format counts as empty."""
    try:
        data = json.loads((root / INDEX_FILE).read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            return {}
        entries = {sid: Entry(*values) for sid, values in data["entries"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {sid: e for sid, e in entries.items() if (root / e.array).is_file()}


def _stat(sid: str, path: Path) -> os.stat_result:
    try:
        return path.stat()
    except OSError as err:
        raise CorruptImageError(f"cannot read stimulus {sid} ({path}): {err.strerror}") from None


def _extend(root: Path, entries: dict[str, Entry], new: dict[str, Path], stats: dict, workers: int,
            progress: bool) -> dict[str, Entry]:
    """Decode ``new`` into rewritten arrays (one per image size), keeping every still-valid entry."""
    for orphan in root.glob(".*.tmp"):  # left by a build that was killed; only lock holders write them
        orphan.unlink(missing_ok=True)
    keep = {sid: e for sid, e in entries.items() if sid not in new}
    shapes = {sid: _image_shape(path) for sid, path in new.items()}
    old_arrays = {name: np.load(root / name, mmap_mode="r") for name in {e.array for e in keep.values()}}
    groups: dict[tuple[int, int], list[str]] = {}
    for sid, e in sorted(keep.items(), key=lambda item: (item[1].array, item[1].row)):  # rows stay in order
        groups.setdefault(tuple(old_arrays[e.array].shape[1:3]), []).append(sid)
    for sid in new:
        groups.setdefault(shapes[sid], []).append(sid)
    decoded = _DecodedStream(new, workers, progress)
    result = dict(keep)
    for (height, width), ids in groups.items():
        if not any(sid in new for sid in ids):
            continue
        state = [(sid, *((stats[sid].st_size, stats[sid].st_mtime_ns) if sid in new else
                         (keep[sid].size, keep[sid].mtime_ns))) for sid in ids]
        name = f"{height}x{width}-{hashlib.sha256(canonical_json(state).encode()).hexdigest()[:16]}.npy"
        pixels = {sid: old_arrays[keep[sid].array][keep[sid].row] for sid in ids if sid in keep}
        _write_array(root / name, ids, pixels, decoded, (height, width))
        result.update({sid: Entry(name, row, size, mtime) for row, (sid, size, mtime) in enumerate(state)})
    decoded.close()
    index = {"format": FORMAT, "decoder": "stimuli.sources.decode_image (Pillow, RGB uint8)",
             "entries": {sid: [e.array, e.row, e.size, e.mtime_ns] for sid, e in sorted(result.items())}}
    atomic_write(root / INDEX_FILE, json.dumps(index, indent=0).encode("utf-8"))
    used = {e.array for e in result.values()}
    for stale in root.glob("*.npy"):
        if stale.name not in used:
            with contextlib.suppress(OSError):  # still mapped by a reader where that blocks deletion
                stale.unlink()
    return result


def _image_shape(path: Path) -> tuple[int, int]:
    """(height, width) from the file's header, without decoding the pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return im.height, im.width
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise CorruptImageError(f"cannot decode image {path}: {err}") from None


class _Decoder:
    """Picklable for DataLoader workers: (id, path) list -> (id, pixels)."""

    def __init__(self, items: list[tuple[str, Path]]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        sid, path = self.items[i]
        return sid, decode_image(path)


class _DecodedStream:
    """Decoded new stimuli as the arrays ask for them; images of other sizes read on the way wait here."""

    def __init__(self, new: dict[str, Path], workers: int, progress: bool):
        from tqdm import tqdm

        dataset = _Decoder(list(new.items()))
        if workers > 0:
            import torch

            stream = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        else:
            stream = _in_threads(dataset, min(4, _cores()))
        self.bar = tqdm(total=len(dataset), desc="decoding stimuli", unit="image", disable=not progress)
        self.stream = iter(stream)
        self.waiting: dict[str, np.ndarray] = {}

    def take(self, sid: str) -> np.ndarray:
        while sid not in self.waiting:
            got, pixels = next(self.stream)
            self.waiting[got] = np.asarray(pixels)
            self.bar.update()
        return self.waiting.pop(sid)

    def close(self) -> None:
        self.bar.close()


def _in_threads(dataset: _Decoder, threads: int):
    """``dataset``'s items in order, decoded by ``threads`` threads of this process: Pillow lets go of the GIL
    while it inflates a file, so a few images are decoded on every core without starting processes. At most
    two per thread are decoded ahead of the reader."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="decode") as pool:
        ahead: deque = deque()
        for i in range(len(dataset)):
            ahead.append(pool.submit(dataset.__getitem__, i))
            if len(ahead) > 2 * threads:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def _write_array(target: Path, ids: list[str], kept: dict, decoded: _DecodedStream, shape: tuple[int, int]) -> None:
    """Write the rows of ``ids`` to a temporary .npy, fsync it and rename it to ``target``."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    os.close(fd)
    try:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(len(ids), *shape, 3))
        for row, sid in enumerate(ids):
            pixels = kept[sid] if sid in kept else decoded.take(sid)
            if pixels.shape != (*shape, 3):
                raise CorruptImageError(f"stimulus {sid} decodes to {pixels.shape}, but its file header says "
                                        f"{shape[0]}x{shape[1]}")
            array[row] = pixels
        array.flush()
        del array
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
