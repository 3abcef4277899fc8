"""The packages import each other only along the data flow, and no module imports itself back.

images -> stimuli -> experiment (the ``cuebench`` contract) -> observers (``human_tasks``,
``experiment_server``, ``model_eval``) -> responses -> ``analysis``. The observers and the
analysis read the stimuli's output only through the contract. Every import counts,
also those inside functions, because a lazy import against the flow is still a dependency.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from import_graph import (BEGIN, ENTRANCES, PACKAGES, block_in, imported_modules, imports_of,  # noqa: E402
                          project_modules, render)

ALLOWED = {
    "cuebench": set(),
    "stimuli": {"cuebench"},
    "human_tasks": {"cuebench"},
    "experiment_server": {"cuebench", "human_tasks"},
    "model_eval": {"cuebench"},
    "analysis": {"cuebench"},
    "cuebench_app": {"cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis"},
}
"""Runners read what stimuli wrote through the contract (images, label sets, study directories), never ``stimuli``;
no package imports the app layer (``cuebench_app``), the one place that imports several of them. The core's two
documented entrances into it (``cuebench.build``, ``python -m cuebench``) are forwards by name (``ENTRANCES``)."""
FORBIDDEN_LIBRARIES = {
    "cuebench": {"torch", "timm", "flask", "psychopy"},
    "analysis": {"torch", "timm", "torchvision"},
    "human_tasks": {"timm"},
    "experiment_server": {"torch", "timm"},
}


MODULES = project_modules()


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_data_flow(package):
    wrong = []
    for name, path in sorted(MODULES.items()):
        if name.split(".")[0] != package:
            continue
        for target in sorted(imports_of(name, path)):
            top = target.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                wrong.append(f"{name} imports {target}")
            if top in FORBIDDEN_LIBRARIES.get(package, ()):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the data flow:\n" + "\n".join(wrong)


def test_the_core_enters_the_app_layer_only_through_its_two_documented_forwards():
    """``cuebench.build`` and ``python -m cuebench`` forward by name to the app layer on top; no other core
    module names it, and what the entrances name exists."""
    into_app = {name: {t for t in imported_modules(path) if t.split(".")[0] == "cuebench_app"}
                for name, path in MODULES.items() if name.split(".")[0] != "cuebench_app"}
    assert {name: found for name, found in into_app.items() if found} == ENTRANCES
    session = imported_modules(ROOT / "human_tasks" / "lab" / "session.py")  # from cuebench import texts
    assert "cuebench.texts" in session and "cuebench" not in session


def test_modules_imported_by_name_are_imports():
    """The command imports each package's cli by name (``importlib.import_module``); designs name their
    parallel task functions as ``module:function``."""
    command = imported_modules(ROOT / "cuebench_app" / "cli.py")
    assert {"human_tasks.cli", "analysis.cli", "experiment_server.cli"} <= command
    assert "stimuli.texture_cues" in imported_modules(ROOT / "stimuli" / "designs" / "cue_decomposition.py")


def test_importing_the_core_and_the_stages_never_imports_the_app_layer():
    code = ("import sys, cuebench, cuebench.trials, cuebench.expdir, cuebench.responses, stimuli.designs, "
            "analysis.report, model_eval.evaluate, human_tasks.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('cuebench_app')))\n"
            "build = cuebench.build\n"
            "print(build.__module__, 'cuebench_app.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.splitlines()
    assert out == ["[]", "cuebench_app.api True"]


OPTIONAL_EXTRAS = ("flask", "waitress", "gunicorn", "psycopg", "psychopy", "torch", "timm", "torchvision", "ray",
                   "submitit", "scipy", "matplotlib", "pingouin", "pyarrow", "psignifit")
"""Modules of pyproject's optional extras (web, postgres, lab, models, scale, analysis)."""


def test_the_command_builds_a_study_without_the_optional_extras(tmp_path):
    """``pip install cuebench`` without extras gives a working ``cuebench``: every subcommand's parser is
    made at start, so an extra imported there at module level would break every command."""
    code = ("import sys\n"
            "class Missing:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {OPTIONAL_EXTRAS!r}:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Missing())\n"
            "from cuebench_app.cli import main\n"
            "sys.exit(main(['stimuli', 'build', '--design', 'suppression', '--images', 'default', "
            "'--conditions', 'grayscale', '--out', 'exp']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "exp" / "experiment.json").is_file()


def test_the_core_s_tests_import_only_the_core():
    """tests/core tests the contract alone: no module of it imports a stage or the app layer, directly, inside a
    function or by name, nor through a test helper it imports (``support`` imports the web server)."""
    helpers = {path.stem: path for path in (ROOT / "tests").glob("*.py")}
    wrong = []
    for path in sorted((ROOT / "tests" / "core").glob("*.py")):
        seen, todo = set(), [path]
        while todo:
            current = todo.pop()
            for target in sorted(imported_modules(current)):
                top = target.split(".")[0]
                if top in PACKAGES and top != "cuebench":
                    wrong.append(f"{path.relative_to(ROOT)} imports {target}"
                                 + (f" (through {current.relative_to(ROOT)})" if current != path else ""))
                elif top in helpers and top not in seen:
                    seen.add(top)
                    todo.append(helpers[top])
    assert not wrong, "tests/core imports beyond the core (move the test to its stage's tests):\n" + "\n".join(wrong)


def test_stimuli_defines_no_part_of_the_contract():
    contract = {"trials", "schema", "responses", "expdir", "counterbalance", "export", "images", "labels", "studies"}
    assert not [p.name for p in (ROOT / "stimuli").glob("*.py") if p.stem in contract]


def test_no_import_circles():
    graph = {name: {t for t in imported_modules(path) if t in MODULES and t != name}
             for name, path in MODULES.items()}
    # a package's __init__ is imported on the way to any of its modules, but does not import them
    cycles = []
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_the_import_graph_in_the_docs_is_the_code_s():
    """docs/architecture.md shows the graph ``scripts/import_graph.py`` reads from the code, not a drawing."""
    docs = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert block_in(docs) is not None, f"docs/architecture.md lacks the {BEGIN} block"
    assert block_in(docs) == render(), "run: python scripts/import_graph.py --write docs/architecture.md"


def _named_in_code(path: Path) -> tuple[set[str], set[str]]:
    """The strings a module's code holds (its docstrings aside) and the identifiers it uses or imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}  # docstrings, attribute docs
    strings = {node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose}
    identifiers = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    identifiers |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    identifiers |= {node.name.split(".")[-1] for node in ast.walk(tree) if isinstance(node, ast.alias)}
    return strings, identifiers


def _plugins(*registries) -> tuple[dict[str, str], dict[str, str]]:
    """The registered names of the plug-ins of ``registries`` (less the contract's own words, see below) and their
    classes' names, each -> the kind of plug-in it is."""
    from cuebench.responses import COLUMNS
    from cuebench.studies import CUE_EXPERIMENTS
    from cuebench.trials import Experiment, Trial

    contract = {*Experiment.model_fields, *Trial.model_fields, *COLUMNS, *CUE_EXPERIMENTS}
    names = {name: registry.singular for registry in registries for name in registry.names() if name not in contract}
    classes = {point.attr.split(".")[-1]: registry.singular for registry in registries
               for point in metadata.entry_points(group=registry.entry_point_group)}
    return names, classes


def _naming(modules, names: dict[str, str], classes: dict[str, str]) -> list[str]:
    found = []
    for name in modules:
        strings, identifiers = _named_in_code(MODULES[name])
        found += [f"{name} names the {names[s]} {s!r}" for s in sorted(strings & set(names))]
        found += [f"{name} names the {classes[c]} class {c}" for c in sorted(identifiers & set(classes))]
    return found


def test_the_core_names_no_design_section_or_trial_type():
    """The core (``cuebench``, less its trial-type cards, which are plug-ins) names no registered design, report
    section or trial type, neither as a string of its code nor by its class: what one plug-in needs sits on the
    plug-in (its card, its words beside it), so the core stays the same as plug-ins come. Built from the
    registries, so a plug-in added later is checked too. A field or folder of the contract that a plug-in shares
    its name with (``adaptive``: the experiment's QUEST+ blocks and their response column; ``dist``: a cue study's
    folder of DiST trials) is the contract's own word."""
    from analysis.sections.base import SECTIONS
    from cuebench.trial_types import TRIAL_TYPES
    from stimuli.designs import DESIGNS

    names, classes = _plugins(DESIGNS, SECTIONS, TRIAL_TYPES)
    assert {"cue-conflict-import", "reliance", "oddity"} <= set(names) and {"Dist", "Oddity"} <= set(classes)
    core = sorted(name for name in MODULES if name.split(".")[0] == "cuebench"
                  and not name.startswith("cuebench.trial_types"))
    found = _naming(core, names, classes)
    assert found == [], "the core names plug-ins:\n" + "\n".join(found)


ANALYSIS_RUNNER = ("analysis.load", "analysis.exclusions", "analysis.chance", "analysis.report",
                   "analysis.sections.base", "analysis.plots", "analysis.figure_style")
"""The analysis's modules every report goes through: loading, exclusions, chance, the section runner, the
section contract and the drawing every section shares."""


def test_the_analysis_runner_names_no_design_or_trial_type():
    """The modules every analysis goes through treat every trial type and design alike: what one needs they ask
    its card (``cuebench.trial_types``: chance, whether answers are right or wrong) or the section that reads it
    declares (``Section.reads_segments``, ``adaptive_blocks``); the figures draw what a section picked (the
    segmentation section picks its example trials). Section names are not checked here: the runner's tables and
    summary keys share words with them (``observers``)."""
    from cuebench.trial_types import TRIAL_TYPES
    from stimuli.designs import DESIGNS

    names, classes = _plugins(DESIGNS, TRIAL_TYPES)
    assert {"segment", "oddity", "suppression"} <= set(names)
    found = _naming(ANALYSIS_RUNNER, names, classes)
    assert found == [], "the analysis's runner names plug-ins:\n" + "\n".join(found)
