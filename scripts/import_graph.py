"""The package import graph, read from the code: every import counts, also those inside functions
and those made by name (``importlib.import_module("stimuli.cli")``, ``"stimuli.suppression:suppress"``).

``python scripts/import_graph.py`` prints which package imports which; ``--write FILE`` puts the
graph between the ``import-graph`` markers of FILE (docs/architecture.md), so the picture in the
docs is made from the code, and ``tests/system/test_layering.py`` checks that it still is.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cuebench", "stimuli", "human_tasks", "experiment_server", "model_eval", "analysis", "cuebench_app")
"""The core contract (``cuebench``), the stages along the data flow, and the app layer on top (``cuebench_app``:
the command, the Python API, the demo, cross-stage workflows), the one package allowed to import every other."""
APP_PACKAGE = "cuebench_app"
ENTRANCES = {"cuebench": {"cuebench_app.api"}, "cuebench.__main__": {"cuebench_app.cli"}}
"""The two documented ways in from the core's name, each a forward by name: ``cuebench.build`` (resolved from
``cuebench_app.api`` on first use, so importing the core loads no stage) and ``python -m cuebench``."""
BEGIN, END = "<!-- import-graph: made by scripts/import_graph.py -->", "<!-- /import-graph -->"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of the project (a file or a folder under ROOT)."""
    where = ROOT.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


MODULE_BY_NAME = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?::[A-Za-z_][\w.]*)?")
"""A string that is exactly a dotted module name, or ``module:attribute``: how the command, the registries and
the parallel builder import modules by name (``importlib.import_module``, task functions)."""


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved: ``from P import N``
    imports the submodule ``P.N`` when there is one, else the module ``P`` (whose attribute ``N`` is); a
    string constant that names a project module (``MODULE_BY_NAME``) is an import by name."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = MODULE_BY_NAME.fullmatch(node.value)
            if named and named["module"].split(".")[0] in PACKAGES and is_module(named["module"]):
                found.add(named["module"])
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            submodules = {f"{prefix}.{alias.name}" for alias in node.names}
            found.update(m for m in submodules if is_module(m))
            if any(not is_module(m) for m in submodules):
                found.add(prefix)
    return found


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def layer_of(module: str) -> str:
    """The row a module belongs to: its top-level package."""
    return module.split(".")[0]


def imports_of(name: str, path: Path) -> set[str]:
    """What a module imports, less its documented entrance into the app layer (``ENTRANCES``)."""
    return imported_modules(path) - ENTRANCES.get(name, set())


def package_graph() -> dict[str, set[str]]:
    """Layer -> the other project packages its modules import."""
    graph: dict[str, set[str]] = {}
    for name, path in project_modules().items():
        layer = layer_of(name)
        targets = {layer_of(t) for t in imports_of(name, path) if t.split(".")[0] in PACKAGES}
        graph.setdefault(layer, set()).update(t for t in targets if t != layer)
    return graph


def render() -> str:
    graph = package_graph()
    order = [*PACKAGES, *sorted(k for k in graph if k not in PACKAGES)]
    width = max(len(k) for k in graph)
    lines = [f"{layer:<{width}}  imports  {', '.join(sorted(graph[layer])) or '(no other package)'}"
             for layer in order if layer in graph]
    return "\n".join([BEGIN, "```text", *lines, "```", END])


def block_in(text: str) -> str | None:
    match = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), text, re.S)
    return match.group(0) if match else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="replace the graph between the markers of this file")
    args = parser.parse_args(argv)
    graph = render()
    if args.write is None:
        print(graph)
        return 0
    text = args.write.read_text(encoding="utf-8")
    if block_in(text) is None:
        print(f"{args.write}: no '{BEGIN}' ... '{END}' markers", file=sys.stderr)
        return 2
    args.write.write_text(text.replace(block_in(text), graph), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
