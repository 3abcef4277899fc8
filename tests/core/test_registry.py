"""The one registry idiom: entry points fill a registry, lookups suggest close names, a broken plug-in fails only
its own lookup, and a process-local plug-in lives only inside ``temporarily``. The installed plug-ins themselves
(every in-tree one declared once, ``cuebench list``) are checked in ``tests/system/test_plugins.py``."""

import os
import subprocess
import sys
import textwrap

import pytest

from cuebench.registry import ALL, Registry, UnknownName, group_of


@pytest.fixture
def colours():
    registry = Registry("test-colours")
    yield registry
    ALL.pop("test-colours")


def test_a_registry_is_filled_by_its_kinds_entry_point_group_and_by_nothing_else(colours):
    assert group_of("report-sections") == "cuebench.report_sections"
    assert colours.entry_point_group == "cuebench.test_colours" and colours.names() == []
    assert not hasattr(colours, "register") and not hasattr(colours, "add")  # no second way to register
    with pytest.raises(ValueError, match="a registry of test-colours exists already"):
        Registry("test-colours")
    with pytest.raises(ValueError, match="filled by the entry point group 'cuebench.test_shades', not 'shades'"):
        Registry("test-shades", entry_point_group="shades")


def test_temporarily_holds_an_entry_inside_the_block_only_and_puts_back_what_was_there(colours):
    class Crimson:
        """A deep red. More text that the listing leaves out.

        A second paragraph."""

    class Scarlet:
        """A bright red (e.g. a fire engine's, cf. Sec. 2 of the card)."""

    with colours.temporarily("crimson", Crimson):
        assert colours["crimson"] is Crimson and "crimson" in colours and colours.names() == ["crimson"]
        assert colours.summary("crimson") == "A deep red."
        with pytest.raises(UnknownName, match=r"unknown test-colour 'crimsen'; did you mean crimson\?"):
            colours.get("crimsen")
        with colours.temporarily("crimson", Scarlet):
            assert colours["crimson"] is Scarlet
            assert colours.summary("crimson") == "A bright red (e.g. a fire engine's, cf. Sec. 2 of the card)."
        assert colours["crimson"] is Crimson
    assert "crimson" not in colours
    with pytest.raises(UnknownName, match=r"unknown test-colour 'crimson'; none is installed \(entry point group cuebench.test_colours\)$"):
        colours.get("crimson")


def test_entry_point_plugins_are_found_and_a_broken_one_fails_only_its_own_lookup(tmp_path):
    """A package on PYTHONPATH whose dist-info declares two plug-ins of the group ``cuebench.test_shapes``, one of
    them naming a module that does not exist (the dist-info is written here, as pip writes it)."""
    dist = tmp_path / "toyplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[cuebench.test_shapes]\nstar = toyplugin_mod:Star\n"
                                           "broken = toyplugin_missing:Thing\n")
    (tmp_path / "toyplugin_mod.py").write_text('class Star:\n    """Five points."""\n')
    code = textwrap.dedent("""
        from cuebench.registry import Registry
        shapes = Registry("test-shapes")
        print(shapes.names(), shapes.summary("star"), shapes.get("star").__module__)
        try:
            shapes.get("broken")
        except Exception as err:
            print(type(err).__name__, err)
        print(sorted(shapes.broken()), [name for name, _ in shapes.working()])
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert out.strip().splitlines() == [
        "['broken', 'star'] Five points. toyplugin_mod",
        "PluginError the test-shape 'broken' of the package toyplugin cannot be loaded: "
        "ModuleNotFoundError: No module named 'toyplugin_missing'",
        "['broken'] ['star']"]
