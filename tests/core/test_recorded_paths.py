"""Paths in outputs: relative to where the command ran, never the rest of the machine's file system."""

from __future__ import annotations

from cuebench.paths import recorded_path


def test_a_path_inside_the_working_folder_is_recorded_relative_to_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert recorded_path(tmp_path / "exp" / "pilot") == "exp/pilot"
    assert recorded_path("exp/pilot") == "exp/pilot"
    assert recorded_path(tmp_path) == "."


def test_a_path_outside_it_is_recorded_by_its_name(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert recorded_path(tmp_path / "data" / "photos") == "photos"
    assert recorded_path(tmp_path / "data" / "photos", start=tmp_path) == "data/photos"
