"""Small real inputs the tests share: a cut of the DiST release in its own layout, and a plug-in
package installed only by being on PYTHONPATH (its dist-info names the entry points)."""

from __future__ import annotations

import shutil
from pathlib import Path


def dist_subset(release: Path, subset: Path, photos: int) -> Path:
    """The first ``photos`` originals of the DiST release: every folder (original, set1, set2) and
    labels.csv cut to the same photos, so the importer reads the release's own layout."""
    keep = sorted(path.name for path in (release / "original").iterdir())[:photos]
    for folder in sorted(path for path in release.iterdir() if path.is_dir()):
        (subset / folder.name).mkdir(parents=True)
        for name in keep:
            shutil.copy(folder / name, subset / folder.name / name)
    stems = {Path(name).stem for name in keep}
    header, *rows = (release / "labels.csv").read_text().splitlines()
    (subset / "labels.csv").write_text("\n".join([header, *(row for row in rows if row.split(",")[0] in stems)]) + "\n")
    return subset


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
