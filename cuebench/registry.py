"""One registry idiom for every kind of plug-in: designs, transforms, corruptions, decision
rules, training algorithms, observers, report sections, benchmarks, export formats, trial types.

A plug-in is registered one way, in-tree or third-party: by a Python entry point in its
package's metadata (the way Brain-Score registers models), in the group ``cuebench.<kind>``
(``-`` as ``_``). cuebench's own plug-ins are listed in its ``pyproject.toml`` exactly as a
third-party package lists its own, so adding one touches its file and one line there, and no
module list or side-effect import decides what exists. Its docstring's first sentence is what
``--help`` and ``cuebench list KIND`` show. An unknown name is a one-line error with "did you mean".
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import re
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from importlib.util import find_spec
from pathlib import Path
from typing import Generic, TypeVar

from .errors import CuebenchError

T = TypeVar("T")

ALL: dict[str, "Registry"] = {}
"""Every registry by its kind, for ``cuebench list KIND``; filled as registries are created."""


class UnknownName(CuebenchError, KeyError):
    """A name that is in no registry entry; the message offers the close matches."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PluginError(CuebenchError):
    """A registered plug-in that cannot be imported (its package is broken or incomplete)."""


def group_of(kind: str) -> str:
    """The entry point group that fills the registry of ``kind``: ``report-sections`` -> ``cuebench.report_sections``."""
    return "cuebench." + kind.replace("-", "_")


class Registry(Generic[T]):
    """Named plug-ins of one kind, each declared by an entry point of the group ``group_of(kind)``.

    The group is read once, on the first lookup, so a package installed beside cuebench contributes
    plug-ins without any change here. A plug-in is imported only when it is asked for by name: a
    broken one fails its own lookup, naming its package, and nobody else's.
    """

    def __init__(self, kind: str, *, entry_point_group: str | None = None):
        """``entry_point_group`` may be written beside a registry's definition for the reader; it is always
        ``group_of(kind)``, so that every kind's group can be told from its name."""
        if kind in ALL:
            raise ValueError(f"a registry of {kind} exists already")
        if entry_point_group not in (None, group_of(kind)):
            raise ValueError(f"the registry of {kind} is filled by the entry point group {group_of(kind)!r}, "
                             f"not {entry_point_group!r}")
        self.kind = kind
        self.entry_point_group = group_of(kind)
        self._entries: dict[str, T | EntryPoint] = {}
        self._broken: dict[str, tuple[str, str]] = {}
        """name -> (package, cause) of each entry-point plug-in whose import failed."""
        self._entry_points_loaded = False
        ALL[kind] = self

    @contextlib.contextmanager
    def temporarily(self, name: str, entry: T) -> Iterator[T]:
        """``entry`` under ``name`` inside the ``with`` block only, whatever was there before coming back after.

        Not a way to register a plug-in (that is an entry point): it is for what lives only in a running
        process and no installed package can declare -- a test's toy plug-in or its variant of an installed
        one, a plug-in tried out in a notebook before it gets its package."""
        self._load_entry_points()
        missing = object()
        before = self._entries.get(name, missing)
        self._entries[name] = entry
        try:
            yield entry
        finally:
            if before is missing:
                self._entries.pop(name, None)
            else:
                self._entries[name] = before

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for point in entry_points(group=self.entry_point_group):
            self._entries.setdefault(point.name, point)

    def get(self, name: str) -> T:
        self._load_entry_points()
        try:
            entry = self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.6)
            hint = (f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(self.names())}"
                    if self._entries else f"; none is installed (entry point group {self.entry_point_group})")
            raise UnknownName(f"unknown {self.singular} {name!r}{hint}") from None
        if isinstance(entry, EntryPoint):
            if name not in self._broken:
                try:
                    loaded = entry.load()
                except Exception as err:  # noqa: BLE001 - any failure of a third-party plug-in's import
                    cause = " ".join(f"{type(err).__name__}: {err}".split())
                    self._broken[name] = (entry.dist.name if entry.dist else entry.value, cause)
                else:
                    self._entries[name] = loaded
                    return loaded
            package, cause = self._broken[name]
            raise PluginError(f"the {self.singular} {name!r} of the package {package} cannot be loaded: {cause}")
        return entry

    __getitem__ = get

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load_entry_points()
        return len(self._entries)

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """Every entry, loaded; a broken plug-in raises ``PluginError`` (see ``working``)."""
        return [(name, self.get(name)) for name in self.names()]

    def working(self) -> list[tuple[str, T]]:
        """Every entry that loads: what a command line or a listing is built from, so that a broken
        plug-in leaves them intact and fails only its own lookup (``broken`` says why)."""
        loaded = []
        for name in self.names():
            try:
                loaded.append((name, self.get(name)))
            except PluginError:
                continue
        return loaded

    def broken(self) -> dict[str, tuple[str, str]]:
        """name -> (package, one-line cause) of every plug-in that cannot be imported."""
        self.working()
        return dict(self._broken)

    def summary(self, name: str) -> str:
        """The first sentence of the entry's docstring, on one line: what ``--help`` and ``cuebench list``
        show; a broken plug-in is marked so, with its package and the cause."""
        try:
            doc = inspect.getdoc(self.get(name)) or ""
        except PluginError:
            package, cause = self._broken[name]
            return f"BROKEN (package {package}): {cause}"
        paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
        return _SENTENCE_END.split(paragraph, maxsplit=1)[0]

    @property
    def singular(self) -> str:
        return self.kind[:-1] if self.kind.endswith("s") else self.kind


_SENTENCE_END = re.compile(r"(?<=[a-z0-9)][.!?])(?<!\bal\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bcf\.)(?<!\bvs\.)"
                           r"(?<!\bSec\.)(?<!\bFig\.)(?<!\bEq\.)(?<!\bExp\.)(?<!\bApp\.)(?<!\bTab\.)\s+(?=[A-Z])")
"""A full stop, then a capital: where a docstring's first sentence ends (not after "et al.", "e.g.", "Sec.", "Exp." ...)."""


REGISTRIES_GROUP = "cuebench.registries"
"""The entry point group naming each registry (``designs = "stimuli.designs:DESIGNS"``): what exists is read from
the installed packages' metadata, never from a list of modules to import."""


def registries() -> dict[str, "Registry"]:
    """Every registry by kind: loading a ``cuebench.registries`` entry point imports the module defining it."""
    for point in entry_points(group=REGISTRIES_GROUP):
        if point.name not in ALL:
            try:
                point.load()
            except Exception as err:  # noqa: BLE001 - a broken package's registry is left out, named
                raise PluginError(f"the registry {point.name!r} ({point.value}) cannot be loaded: {err}") from err
    return dict(ALL)


PLUGIN_GROUPS = "cuebench."
"""The prefix of every registry's entry point group (``cuebench.designs``, ``cuebench.trial_types``, ...) and of
``cuebench.registries``."""


def plugin_modules() -> list[str]:
    """The module of every installed plug-in and registry, read from the packages' metadata (the entry points
    the registries read), sorted: what a plug-in keeps beside its module is found without importing it."""
    return sorted({point.module for group in entry_points().groups if group.startswith(PLUGIN_GROUPS)
                   for point in entry_points(group=group)})


def module_file(module: str) -> Path | None:
    """The source file of ``module`` (``stimuli.designs.dist`` -> ``.../stimuli/designs/dist.py``, a package's
    ``__init__.py``), found from its top-level package's location without importing the module or its parents
    (a plug-in may import heavy libraries, or the core that asks); None when it is not there as files."""
    top, *inner = module.split(".")
    try:
        spec = find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not inner:
        return Path(spec.origin) if spec.origin and spec.has_location else None
    for base in spec.submodule_search_locations or ():
        path = Path(base).joinpath(*inner)
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None
