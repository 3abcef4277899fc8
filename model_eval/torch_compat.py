"""Import timm where torchvision's compiled operators do not load.

The only torchvision that matches torch 2.13.0 on PyPI is a CUDA build; on a CPU-only
torch its native library fails to register ``torchvision::nms``, and torchvision's
Python code then fails at import while registering fake kernels for that schema. timm
never calls those operators, so when (and only when) the native ops are missing we
declare the two schemas, which lets ``import torchvision`` (and so ``import timm``)
succeed; calling ``torchvision.ops.nms`` still fails, loudly.
"""

from __future__ import annotations

import importlib
import sys

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None


def _native_ops_missing(err: Exception) -> bool:
    return "torchvision::nms" in str(err) or "torchvision::qnms" in str(err)


def import_timm():
    """Return the ``timm`` module, declaring torchvision's missing schemas first if needed."""
    try:
        return importlib.import_module("timm")
    except RuntimeError as err:
        if not _native_ops_missing(err):
            raise
    _declare_missing_schemas()
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith(("torchvision.", "timm"))]:
        del sys.modules[name]
    return importlib.import_module("timm")


def _declare_missing_schemas() -> None:
    global _library
    import torch

    if _library is None:
        _library = torch.library.Library("torchvision", "DEF")
        for name, schema in _SCHEMAS.items():
            if not _has_schema(name):
                _library.define(schema)


def _has_schema(name: str) -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False
