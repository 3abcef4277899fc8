"""Expensive stimuli made in shards on any executor, before a design's ordinary build.

A shard makes the costly stimuli of a few source images (EED shape cues) into the
experiment directory, then records what it made in ``.shards/<shard>.json``. The
design's ordinary build that follows finds them there as already made (``known_stimuli``)
and writes experiment.json exactly as a local build would; its commit (``stimuli.staging``) removes the
``.shards`` folder, so the finished directory does not depend on the executor. Stimuli
are content-addressed and written atomically, so two shards finishing together, or a
killed shard run again, can only write the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from cuebench.expdir import ExperimentDir, atomic_write, canonical_json
from cuebench.trials import Stimulus

DEFAULT_SHARD_SIZE = 32
"""Source images per shard: large enough to fill a GPU batch, small enough to spread."""


def manifest_path(expdir: ExperimentDir, name: str) -> Path:
    return expdir.shards_dir / f"{name}.json"


def write_manifest(expdir: ExperimentDir, name: str, stimuli: list[Stimulus]) -> None:
    """Record a finished shard's stimuli (written last: its presence means the shard is done)."""
    atomic_write(manifest_path(expdir, name), canonical_json([s.to_dict() for s in stimuli]).encode())


def manifest_stimuli(expdir: ExperimentDir) -> list[Stimulus]:
    """Every stimulus a finished shard recorded whose file is on disk."""
    folder = expdir.shards_dir
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        for i, data in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            stim = Stimulus.from_dict(data, f"{path}[{i}]")
            if expdir.stimulus_path(stim).is_file():
                found.append(stim)
    return found


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]
