"""The installed cuebench's version, recorded in every provenance; a core module, so the stages read it
without importing the ``cuebench`` namespace (the app layer's face, see ``cuebench/__init__.py``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cuebench")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"
