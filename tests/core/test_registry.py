"""The one registry idiom: decorator registration, entry points, did-you-mean, ``cuebench list``."""

import os
import subprocess
import sys
import textwrap

import pytest

from cuebench.registry import ALL, Registry, UnknownName
from support import plugin_package


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
    plugin_package(tmp_path, "toyplugin",
                   {"cuebench.test-shapes": {"star": "toyplugin_mod:Star", "broken": "toyplugin_missing:Thing"}},
                   {"toyplugin_mod.py": 'class Star:\n    """Five points."""\n'})
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



@pytest.fixture(scope="module")
def broken_plugins(tmp_path_factory):
    """A package, installed by being on PYTHONPATH, whose design and report section fail to import:
    one names a module that is missing, the other raises while it is imported."""
    return plugin_package(tmp_path_factory.mktemp("broken"), "brokenplugins",
                          {"cuebench.designs": {"broken-design": "brokenplugins_missing:Design"},
                           "cuebench.report_sections": {"broken-section": "brokenplugins_section:Section"}},
                          {"brokenplugins_section.py": 'raise RuntimeError("needs a library that is not installed")\n'})


def cuebench_with(package, cwd, *args: str) -> subprocess.CompletedProcess:
    paths = [str(package), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    return subprocess.run([sys.executable, "-m", "cuebench", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)


def test_broken_plugins_are_listed_as_broken_and_leave_every_command_line_intact(broken_plugins, tmp_path):
    designs = cuebench_with(broken_plugins, tmp_path, "list", "designs")
    assert designs.returncode == 0, designs.stderr
    assert ("broken-design BROKEN (package brokenplugins): ModuleNotFoundError: No module named "
            "'brokenplugins_missing'") in [" ".join(line.split()) for line in designs.stdout.splitlines()]
    assert any(line.startswith("suppression ") for line in designs.stdout.splitlines())
    sections = cuebench_with(broken_plugins, tmp_path, "list", "report-sections")
    assert sections.returncode == 0, sections.stderr
    assert ("broken-section BROKEN (package brokenplugins): RuntimeError: needs a library that is not installed"
            in [" ".join(line.split()) for line in sections.stdout.splitlines()])
    for command in (("report", "--help"), ("eval", "--help"), ("analyze", "--help"), ("stimuli", "build", "--help")):
        done = cuebench_with(broken_plugins, tmp_path, *command)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr)
    assert "shape-bias" in cuebench_with(broken_plugins, tmp_path, "analyze", "--help").stdout


def test_a_broken_plugin_fails_its_own_lookup_in_one_line_and_only_its_own(broken_plugins, tmp_path):
    build = cuebench_with(broken_plugins, tmp_path, "stimuli", "build", "--design", "broken-design", "--out", "exp")
    assert build.returncode == 2 and not (tmp_path / "exp").exists()
    assert build.stderr == ("cuebench stimuli: error: the design 'broken-design' of the package brokenplugins cannot "
                            "be loaded: ModuleNotFoundError: No module named 'brokenplugins_missing'\n")
    from cuebench.responses import ResponseStore

    rows = [{"experiment": "toy", "observer": "p0", "observer_kind": "human", "session": "1", "trial_index": i,
             "trial_id": f"t{i}", "role": "test", "trial_type": "classify", "condition": "original", "level": None,
             "params": {}, "category": category, "response": "cat", "correct_answer": category,
             "correct": int(category == "cat"), "rt_ms": 500.0} for i, category in enumerate(("cat", "dog") * 2)]
    with ResponseStore(tmp_path / "r.sqlite") as store:
        store.write_many(rows)
    analyzed = cuebench_with(broken_plugins, tmp_path, "analyze", "r.sqlite")
    assert analyzed.returncode == 0, analyzed.stderr
    assert ("note: report section 'broken-section' of the package brokenplugins is left out: it cannot be loaded "
            "(RuntimeError: needs a library that is not installed)") in analyzed.stdout.splitlines()


def test_every_in_tree_plugin_is_an_entry_point_and_every_entry_point_is_in_tree():
    """In-tree plug-ins register as third-party ones do: importing every module of the project registers
    nothing that pyproject.toml's entry points do not already name (and the entry points name no plug-in
    that is gone), so no module list or side-effect import decides what exists."""
    code = textwrap.dedent("""
        import importlib, json, pkgutil
        from importlib.metadata import entry_points
        from cuebench.registry import ALL, registries

        def declared(registry):
            return {p.name: p.value for p in entry_points(group=registry.entry_point_group)} \\
                if registry.entry_point_group else {}

        before = {kind: sorted(declared(r)) for kind, r in registries().items()}
        for package in ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis"):
            module = importlib.import_module(package)
            for info in pkgutil.walk_packages(module.__path__, package + "."):
                if not info.name.endswith("__main__"):
                    importlib.import_module(info.name)
        registered, broken = {}, {}
        for kind, registry in ALL.items():
            broken[kind] = sorted(registry.broken())   # loads every entry point: one naming a gone plug-in breaks
            names = {name for name, entry in registry._entries.items()
                     if getattr(entry, "__module__", "").split(".")[0] in
                     ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis")}
            registered[kind] = sorted(names)
        print(json.dumps({"declared": before, "registered": registered, "broken": broken,
                          "groups": {k: r.entry_point_group for k, r in ALL.items()}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    found = json.loads(done.stdout.splitlines()[-1])
    # registries whose plug-ins live in other modules than the registry itself need an entry point group
    for kind, names in found["registered"].items():
        if found["groups"][kind] is None:
            continue
        assert names == found["declared"][kind], (
            f"{kind}: registered by import {sorted(set(names) - set(found['declared'][kind]))}, "
            f"declared but not registered {sorted(set(found['declared'][kind]) - set(names))}: "
            "list every in-tree plug-in under pyproject.toml's entry points")
    assert not any(found["broken"].values()), found["broken"]
    assert {"designs", "report-sections", "export-formats", "observer-adapters", "algorithms", "benchmarks"} <= set(
        found["declared"])


def test_export_formats_of_every_package_work_from_plain_python(tmp_path):
    """``cuebench.export.export(..., 'psychopy')`` in a fresh interpreter: the format defined in ``human_tasks``
    is found by its entry point, without importing any command-line module first."""
    from cuebench.responses import ResponseStore, trial_row
    from stimuli.web_sample import build_sample_experiment

    experiment = build_sample_experiment(tmp_path / "exp")
    ResponseStore(tmp_path / "exp" / "responses.sqlite").write_many([
        trial_row(experiment, experiment.trials[0], observer="P01", session=1, trial_index=0, observer_kind="human",
                  response=experiment.trials[0].correct, rt_ms=640.0, timed_out=0)])
    code = ("import sys; from cuebench.export import export\n"
            "for fmt in ('psychopy', 'participants', 'csv'):\n"
            "    print(fmt, [p.name for p in export(sys.argv[1], fmt, sys.argv[2] + '/' + fmt)])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "exp"), str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["psychopy", "participants", "csv"]
