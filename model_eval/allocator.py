"""Keep freed memory inside the process during CPU inference.

glibc's malloc serves every allocation above its mmap threshold (at most 32 MiB by its
dynamic rule) with a fresh ``mmap`` and returns it with ``munmap`` when freed. A CNN's
activations for a batch of 224x224 images are such blocks, so every batch page-faults
hundreds of megabytes of zeroed memory back in: on CPU the kernel time can exceed the
arithmetic (see docs/models.md for measurements). Raising the mmap and trim thresholds
makes freed blocks stay in the heap and be reused by the next batch, as the jemalloc and
tcmalloc preloads that PyTorch's CPU tuning guide recommends do. The cost is that the
process keeps its peak memory until it exits, which suits a command that evaluates.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
LARGE = (1 << 31) - 1

_kept = False


def keep_freed_memory() -> bool:
    """Ask glibc to reuse freed large blocks instead of unmapping them; True if in effect.

    A no-op (False) where the C library is not glibc (macOS, Windows, musl)."""
    global _kept
    if _kept or not sys.platform.startswith("linux"):
        return _kept
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    _kept = bool(mallopt(M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(M_TRIM_THRESHOLD, LARGE))
    return _kept
