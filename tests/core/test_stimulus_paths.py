"""Many stimulus paths at once keep the one-file check: nothing that leads out of the experiment."""

import os

import pytest

from cuebench.expdir import ExperimentDir, OutsideExperimentError
from cuebench.trials import Stimulus


def stimulus(name: str) -> Stimulus:
    """Built without validation, so a path the experiment file's own check would refuse reaches this one too."""
    return Stimulus.model_construct(id=name.replace("/", "-"), path=f"stimuli/{name}")


@pytest.fixture
def folders(tmp_path):
    """An experiment whose stimuli folder holds a file, a link to it, a sub-folder and a link to a file outside."""
    root = tmp_path / "exp"
    (root / "stimuli" / "sub").mkdir(parents=True)
    (root / "stimuli" / "a.png").write_bytes(b"a")
    (root / "stimuli" / "sub" / "b.png").write_bytes(b"b")
    os.symlink(root / "stimuli" / "a.png", root / "stimuli" / "inside.png")
    (tmp_path / "secret.png").write_bytes(b"s")
    os.symlink(tmp_path / "secret.png", root / "stimuli" / "outside.png")
    return root


def test_files_inside_map_to_their_paths(folders):
    expdir = ExperimentDir(folders)
    stimuli = {s.id: s for s in map(stimulus, ["a.png", "sub/b.png", "inside.png"])}
    assert expdir.stimulus_paths(stimuli) == {"a.png": folders / "stimuli" / "a.png",
                                              "sub-b.png": folders / "stimuli" / "sub" / "b.png",
                                              "inside.png": folders / "stimuli" / "inside.png"}


@pytest.mark.parametrize("name", ["outside.png", "../secret.png", "sub/../../../secret.png"])
def test_a_file_leading_out_is_refused(folders, name):
    with pytest.raises(OutsideExperimentError, match="leads outside the experiment directory"):
        ExperimentDir(folders).stimulus_paths({"x": stimulus(name), "a": stimulus("a.png")})


def test_a_stimuli_folder_linked_out_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "a.png").write_bytes(b"a")
    (tmp_path / "exp").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "exp" / "stimuli")
    with pytest.raises(OutsideExperimentError):
        ExperimentDir(tmp_path / "exp").stimulus_paths({"a": stimulus("a.png")})
