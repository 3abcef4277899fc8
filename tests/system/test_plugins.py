"""The installed plug-ins, as the package metadata declares them: every in-tree plug-in is one entry point (no
decorator, no side-effect import), every entry point loads, every registry has its group and is named under
``cuebench.registries``; ``cuebench list`` shows them all; a third-party transform, corruption and decision rule
are found the same way; a broken plug-in spoils only its own name."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import tomllib

import numpy as np
import pytest

from conftest import REPO
from support import plugin_package

PACKAGES = ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis", "cuebench_app")
DECLARED = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
"""pyproject.toml's entry point groups: group -> {name: "module:attribute"}."""


def cuebench_with(package, cwd, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """``cuebench ARGS`` (or ``python -c CODE``) in a fresh interpreter with ``package`` installed beside cuebench."""
    paths = [str(package) if package else "", os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "cuebench", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """What a fresh interpreter finds after importing every module of the project: each registry's group, the
    names it holds, the entry points it declares, what fails to load, and each loaded plug-in's module and
    ``name`` attribute (where it has one)."""
    code = textwrap.dedent("""
        import importlib, json, pkgutil
        from importlib.metadata import entry_points
        from cuebench.registry import ALL, REGISTRIES_GROUP, registries

        named = sorted(p.name for p in entry_points(group=REGISTRIES_GROUP))
        before = sorted(registries())
        for package in ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis",
                        "cuebench_app"):
            module = importlib.import_module(package)
            for info in pkgutil.walk_packages(module.__path__, package + "."):
                if not info.name.endswith("__main__"):
                    importlib.import_module(info.name)
        found = {}
        for kind, registry in ALL.items():
            declared = {p.name: p.value for p in entry_points(group=registry.entry_point_group)}
            held = registry.names()
            broken = registry.broken()
            plugins = {name: {"module": entry.__module__, "qualname": entry.__qualname__,
                              "name": getattr(entry, "name", None)} for name, entry in registry.working()}
            found[kind] = {"group": registry.entry_point_group, "declared": declared, "held": held,
                           "broken": broken, "plugins": plugins}
        print(json.dumps({"named": named, "before": before, "registries": found}))
    """)
    done = cuebench_with(None, tmp_path_factory.mktemp("installed"), code=code)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_registry_has_its_group_and_is_named_under_cuebench_registries(installed):
    """A registry nobody names would hide its plug-ins from ``cuebench list``; one without a group could only be
    filled by import. Every registry the project's modules create is named, and ``registries()`` alone finds
    them all (no module has to be imported first)."""
    registries = installed["registries"]
    assert installed["named"] == installed["before"] == sorted(registries)
    assert sorted(DECLARED["cuebench.registries"]) == sorted(registries)
    for kind, found in registries.items():
        assert found["group"] == "cuebench." + kind.replace("-", "_")
        assert found["group"] in DECLARED, f"{kind}: pyproject.toml has no [project.entry-points.\"{found['group']}\"]"


def test_every_in_tree_plugin_is_one_entry_point_that_loads_and_nothing_registers_by_import(installed):
    """What a registry holds after every module was imported is exactly what its group declares: importing
    registers nothing. Every entry loads, names an in-tree object no other entry of its group names, and a plug-in
    that carries its own ``name`` (sections, cards, rules, benchmarks) carries its entry point's."""
    for kind, found in installed["registries"].items():
        group = DECLARED[found["group"]]
        assert found["declared"] == group, f"{kind}: the installed metadata differs from pyproject.toml; pip install -e ."
        assert found["held"] == sorted(group), f"{kind}: registered by import: {set(found['held']) - set(group)}"
        assert not found["broken"], f"{kind}: {found['broken']}"
        targets = list(group.values())
        assert len(set(targets)) == len(targets), f"{kind}: one plug-in under two names: {targets}"
        for name, plugin in found["plugins"].items():
            assert group[name] == f"{plugin['module']}:{plugin['qualname']}"
            assert plugin["module"].split(".")[0] in PACKAGES
            assert plugin["name"] in (None, name), f"{kind} {name!r} calls itself {plugin['name']!r}"


def test_no_module_registers_a_plugin_at_run_time():
    """``Registry.temporarily`` is for a test's or a notebook's plug-in: no module of the project calls it."""
    calls = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr in ("temporarily", "register", "add") and \
                        isinstance(node.value, ast.Name) and node.value.id.isupper():
                    calls.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not calls, calls


def test_cuebench_list_shows_every_registry_with_each_plugin_and_its_summary(installed, tmp_path):
    listed = cuebench_with(None, tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    blocks = {block.splitlines()[0]: block.splitlines()[1:] for block in listed.stdout.strip().split("\n\n")}
    expected = {f"{kind} ({len(found['held'])}; entry point group {found['group']})": kind
                for kind, found in installed["registries"].items()}
    assert sorted(blocks) == sorted(expected)
    for heading, lines in blocks.items():
        assert [line.split()[0] for line in lines] == installed["registries"][expected[heading]]["held"]
        assert all(line.startswith("  ") and len(line.split(None, 1)) == 2 for line in lines), lines
    transforms = {line.split()[0]: line.split(None, 1)[1] for line in blocks[next(h for h in blocks if
                                                                               h.startswith("transforms "))]}
    assert transforms["nonlocal_means"] == "Non-local means (Buades et al. 2005)."  # the first sentence only
    one = cuebench_with(None, tmp_path, "list", "decision-rules")
    assert one.returncode == 0
    rules = {line.split()[0]: line.split(None, 1)[1] for line in one.stdout.splitlines()}
    assert sorted(rules) == installed["registries"]["decision-rules"]["held"]
    assert rules["16class-burgert"] == 'Summed probability, answered only above 0.5, else "not clear" (Burgert et al. 2025).'
    unknown = cuebench_with(None, tmp_path, "list", "colours-that-do-not-exist")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "unknown kind 'colours-that-do-not-exist'" in unknown.stderr


THIRD_PARTY = '''
"""A third-party transform, corruption and decision rule."""
import numpy as np
from model_eval.decisions import ClassifyRule, Decision, SixteenClassMean


def invert(image, params, rng):
    """Photographic negative: 255 - every channel."""
    return 255 - image
invert.params, invert.levels, invert.cue = {}, ({},), "colour"


def posterize(gray, levels, rng):
    """Posterize: the grey values rounded to the given number of levels."""
    return np.round(gray * (levels - 1)) / (levels - 1)
posterize.param, posterize.grid = "levels", (256.0, 8.0, 2.0)


class FirstLabel(ClassifyRule):
    """Always the first label of the label set (a floor for a model comparison)."""

    name = "first-label"

    def decide_rows(self, probs, choices, mapping):
        return [Decision(trial_choices[0], {}) for trial_choices in choices]


class Forgetful(SixteenClassMean):
    """The mean rule under a new name it forgot to give itself."""
'''


def test_a_third_party_transform_corruption_and_decision_rule_are_found_by_their_entry_points(tmp_path):
    package = plugin_package(tmp_path / "pkg", "extras", {
        "cuebench.transforms": {"invert": "extras:invert"},
        "cuebench.corruptions": {"posterize": "extras:posterize"},
        "cuebench.decision_rules": {"first-label": "extras:FirstLabel", "forgetful": "extras:Forgetful"}},
        {"extras.py": THIRD_PARTY})
    listed = cuebench_with(package, tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    lines = [" ".join(line.split()) for line in listed.stdout.splitlines()]
    assert {"invert Photographic negative: 255 - every channel.",
            "posterize Posterize: the grey values rounded to the given number of levels.",
            "first-label Always the first label of the label set (a floor for a model comparison)."} <= set(lines)
    assert "first-label" in cuebench_with(package, tmp_path, "eval", "--help").stdout
    code = textwrap.dedent("""
        import numpy as np
        from stimuli.corruptions import corrupt
        from stimuli.suppression import suppress
        from model_eval.decisions import rule_named
        image = np.array([[[0, 100, 255], [30, 30, 30]]], dtype=np.uint8)
        print(suppress(image, "invert", {}, 0).tolist())
        print(corrupt(image, "posterize", 2.0)[..., 0].tolist())
        print(type(rule_named("first-label")).__name__)
        try:
            rule_named("forgetful")
        except Exception as err:
            print(type(err).__name__, err)
    """)
    done = cuebench_with(package, tmp_path, code=code)
    assert done.returncode == 0, done.stderr[-2000:]
    negative, posterized, rule, forgetful = done.stdout.splitlines()
    assert json.loads(negative) == [[[255, 155, 0], [225, 225, 225]]]
    # by hand: rgb2gray weights .2125 R + .7154 G + .0721 B on [0, 1]; (0, 100, 255) -> .3 -> 0 of 2 levels,
    # (30, 30, 30) -> .118 -> 0: both black
    gray = (np.array([[0, 100, 255], [30, 30, 30]]) @ [0.2125, 0.7154, 0.0721]) / 255
    assert json.loads(posterized) == [[int(round(v) * 255) for v in gray]]
    assert rule == "FirstLabel"
    assert forgetful == ("DecisionError the decision rule 'forgetful' (extras.Forgetful) calls itself '16class-mean': "
                         "set its name = 'forgetful'")
    built = cuebench_with(package, tmp_path, "stimuli", "build", "--design", "suppression", "--conditions", "invert",
                          "--images", "default", "--workers", "1", "--out", "exp")
    assert built.returncode == 0, built.stderr
    trials = json.loads((tmp_path / "exp" / "experiment.json").read_text())["trials"]
    assert {(t["condition"], t.get("level")) for t in trials if t["role"] == "test"} == {("original", None),
                                                                                         ("invert", 0)}


@pytest.fixture(scope="module")
def broken_plugins(tmp_path_factory):
    """A package, installed by being on PYTHONPATH, whose design and report section fail to import:
    one names a module that is missing, the other raises while it is imported."""
    return plugin_package(tmp_path_factory.mktemp("broken"), "brokenplugins",
                          {"cuebench.designs": {"broken-design": "brokenplugins_missing:Design"},
                           "cuebench.report_sections": {"broken-section": "brokenplugins_section:Section"}},
                          {"brokenplugins_section.py": 'raise RuntimeError("needs a library that is not installed")\n'})


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
