"""Stimuli: image sources, transforms, the trial/experiment schema and experiment design."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cuebench")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"
