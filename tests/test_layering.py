"""The packages import each other only along the data flow, and no module imports itself back.

images -> stimuli -> experiment (the ``cuebench`` contract) -> observers (``human_tasks``,
``experiment_server``, ``model_eval``) -> responses -> ``analysis``. The observers and the
analysis read the stimuli's output only through the contract. Every import counts,
also those inside functions, because a lazy import against the flow is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis")
APP_MODULES = {"cuebench.cli", "cuebench.demo", "cuebench.__main__", "cuebench.api"}
"""The command wires every package together; it is the one place allowed to import them all."""

ALLOWED = {
    "cuebench": set(),
    "stimuli": {"cuebench"},
    "human_tasks": {"cuebench"},
    "experiment_server": {"cuebench", "human_tasks"},
    "model_eval": {"cuebench"},
    "analysis": {"cuebench"},
}
"""Runners read what stimuli wrote through the contract (images, label sets, study directories), never ``stimuli``."""
WORKFLOW_MODULES = {"model_eval.feature_nets", "model_eval.training.cue_study"}
"""Workflows that make stimuli for a model (texture synthesis against a model's features; the
train-cues study builds its experiments): they wire two stages and leave ``model_eval`` for the
app layer (issue 22 item 5); until then they are the only modules that may import ``stimuli`` from above."""
FORBIDDEN_LIBRARIES = {
    "cuebench": {"torch", "timm", "flask", "psychopy"},
    "analysis": {"torch", "timm", "torchvision"},
    "human_tasks": {"timm"},
    "experiment_server": {"torch", "timm"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


MODULES = project_modules()


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_data_flow(package):
    wrong = []
    for name, path in sorted(MODULES.items()):
        if name.split(".")[0] != package or name in APP_MODULES:
            continue
        for target in sorted(imported_modules(path)):
            top = target.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package] \
                    and not (name in WORKFLOW_MODULES and top == "stimuli"):
                wrong.append(f"{name} imports {target}")
            if top in FORBIDDEN_LIBRARIES.get(package, ()):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the data flow:\n" + "\n".join(wrong)


def test_stimuli_defines_no_part_of_the_contract():
    contract = {"trials", "schema", "responses", "expdir", "design", "export", "images", "labels", "studies"}
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
