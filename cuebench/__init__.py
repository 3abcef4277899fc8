"""cuebench: the core contract every stage reads (trials, experiments, responses, storage, ...).

``cuebench.build(design, images=..., options=...)`` builds an experiment (``cuebench_app.api.build``).
It is resolved on first use, so ``import cuebench.trials`` (what every stage does) never loads the app
layer or any stage. The core contract (trials, experiments, responses, experiment directories, ...)
lives in the submodules; no core or stage module imports this namespace itself, only its submodules
(``tests/system/test_layering.py``).
"""

from .version import __version__

__all__ = ["__version__", "build"]

APP_FUNCTIONS = {"build": "cuebench_app.api"}
"""Names of the namespace that the app layer provides: name -> the module defining it."""


def __getattr__(name: str):
    if name not in APP_FUNCTIONS:
        raise AttributeError(f"module 'cuebench' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(APP_FUNCTIONS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *APP_FUNCTIONS})
