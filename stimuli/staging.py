"""All-or-nothing builds: a design works in a staging folder beside the experiment directory, and its
results reach the directory only when the build succeeded.

The staging folder ``.<name>.building`` starts with hard links to the directory's files (never its
response database), so a re-run reuses every stimulus already made at the cost of a link. On success
the new and changed files move into the directory, ``experiment.json`` last (each move an atomic
rename within one file system), and the staging folder goes. On failure or interruption the
directory is exactly as it was; the staging folder stays with what was made so far, so the next run
of the same build picks up the shards an executor finished (``stimuli.shards``) instead of repeating
them.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from cuebench.expdir import EXPERIMENT_FILE, RESPONSES_FILE, ExperimentDir
from cuebench.trials import Experiment

NEVER_STAGED = (RESPONSES_FILE, f"{RESPONSES_FILE}-wal", f"{RESPONSES_FILE}-shm", f"{RESPONSES_FILE}-journal")
"""Collected responses stay where they are: a build never copies, moves or replaces them."""


def staging_folder(out: Path) -> Path:
    return out.parent / f".{out.name}.building"


class Staging:
    """``with Staging(out) as s: ...; s.commit(experiment)``: see the module docstring."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.root = staging_folder(self.out)

    def __enter__(self) -> "Staging":
        existing = ExperimentDir(self.out)
        if existing.experiment_file.is_file():
            existing.load()  # a malformed experiment.json is named where the researcher finds it
        self.root.mkdir(parents=True, exist_ok=True)
        if self.out.is_dir():
            for path in self.out.rglob("*"):
                rel = path.relative_to(self.out)
                if path.is_dir() or rel.name in NEVER_STAGED:
                    continue
                target = self.root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.unlink(missing_ok=True)
                _link_or_copy(path, target)
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None or not self.new_files():
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            print(f"the build stopped; {self.out} is unchanged, and the work made so far stays in {self.root} "
                  "for the next run of this build (delete it to start afresh)", file=sys.stderr)

    def new_files(self) -> list[Path]:
        """Files of the staging folder that the experiment directory does not hold (yet), relative to it."""
        new = []
        for path in self.root.rglob("*"):
            rel = path.relative_to(self.root)
            target = self.out / rel
            if not path.is_dir() and not (target.exists() and os.path.samefile(path, target)):
                new.append(rel)
        return sorted(new, key=lambda rel: rel == Path(EXPERIMENT_FILE))

    def commit(self, experiment: Experiment) -> None:
        """Save ``experiment`` (refused when it would change the trials of collected responses) and the
        study texts it lacks, then move the staging folder's new and changed files into the experiment
        directory, experiment.json last."""
        from cuebench.texts import refresh_texts, stale_warning

        from .build import check_replaceable

        check_replaceable(ExperimentDir(self.out), experiment)
        staged = ExperimentDir(self.root)
        staged.save(experiment)
        warning = stale_warning(ExperimentDir(self.out), refresh_texts(staged, experiment),  # edited texts kept
                                experiment.language)
        if warning:
            print(warning, file=sys.stderr)
        staged.clear_shards()
        if not self.out.exists():
            self.out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.root, self.out)
            return
        for rel in self.new_files():
            source, target = self.root / rel, self.out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
        ExperimentDir(self.out).clear_shards()


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
