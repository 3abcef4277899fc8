"""The one registry idiom: decorator registration, entry points, did-you-mean, ``cuebench list``."""

import os
import subprocess
import sys
import textwrap

import pytest

from cuebench.registry import ALL, Registry, UnknownName


def test_decorator_registers_and_lookup_suggests_close_names():
    colours = Registry("test-colours")
    try:
        @colours.register("crimson")
        class Crimson:
            """A deep red.

            More text that the listing leaves out."""

        assert colours["crimson"] is Crimson
        assert "crimson" in colours and colours.names() == ["crimson"]
        assert colours.summary("crimson") == "A deep red."
        with pytest.raises(UnknownName, match=r"unknown test-colour 'crimsen'; did you mean crimson\?"):
            colours.get("crimsen")
        with pytest.raises(ValueError, match="registered already"):
            colours.add("crimson", object())
    finally:
        ALL.pop("test-colours")


def test_entry_point_plugins_are_found(tmp_path):
    dist = tmp_path / "toyplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[cuebench.test-shapes]\nstar = toyplugin_mod:Star\n"
                                           "broken = toyplugin_missing:Thing\n")
    (tmp_path / "toyplugin_mod.py").write_text('class Star:\n    """Five points."""\n')
    code = textwrap.dedent("""
        from cuebench.registry import Registry
        shapes = Registry("test-shapes", entry_point_group="cuebench.test-shapes")
        print(shapes.names(), shapes.summary("star"))
        try:
            shapes.get("broken")
        except Exception as err:
            print(type(err).__name__, err)
    """)
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}, capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    lines = out.strip().splitlines()
    assert lines[0] == "['broken', 'star'] Five points."  # a broken plug-in spoils only its own lookup
    assert lines[1] == ("PluginError the test-shape 'broken' of the package toyplugin cannot be loaded: "
                        "ModuleNotFoundError: No module named 'toyplugin_missing'")


def test_list_command_names_unknown_kind_in_one_line():
    done = subprocess.run([sys.executable, "-m", "cuebench", "list", "colours-that-do-not-exist"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown kind 'colours-that-do-not-exist'" in done.stderr

