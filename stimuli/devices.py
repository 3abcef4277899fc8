"""Which torch device a stimulus computation runs on, checked before any work starts.

torch is imported inside the function so that ``stimuli`` stays importable without it.
"""

from __future__ import annotations

from cuebench.errors import CuebenchError


def resolve_device(spec: str, option: str, error: type[CuebenchError] = CuebenchError) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; any other torch device as given.

    ``option`` names the command-line option in the message; ``error`` is the caller's error type.
    """
    import torch

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise error(f"{option}: unknown device {spec!r}, not a torch device (use auto, cpu or cuda)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise error(f"{option} {spec!r}: CUDA is not available on this machine (use cpu)")
    return str(dev)
