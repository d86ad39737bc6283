"""Move memory pages within a process without copying or zeroing them (Linux ``mremap``).

Why: a file read window by window into a fresh anonymous mapping pays a page fault and the
kernel's zeroing of every new page, for every window; on a busy machine that costs as much as
copying the file bytes themselves. A window already decoded can instead hand its pages to the
next window: ``mremap(MREMAP_FIXED | MREMAP_DONTUNMAP)`` moves the physical pages to the new
address, and the old range stays mapped (reading as zeros) so nothing that still looks at it can
fault. Where the call is unavailable (not Linux, a kernel older than 5.7) :func:`move` returns
``False`` and callers free the pages as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

MREMAP_MAYMOVE = 1
MREMAP_FIXED = 2
MREMAP_DONTUNMAP = 4
_FAILED = ctypes.c_void_p(-1).value


def _load() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.mremap
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    return fn


_MREMAP = _load()
_usable = _MREMAP is not None


def available() -> bool:
    """Whether :func:`move` may work here (it stops trying after the first refusal)."""
    return _usable


def move(src: int, dst: int, length: int) -> bool:
    """Move the pages of ``[src, src+length)`` to ``dst`` (both page-aligned, same private
    anonymous mapping, not overlapping); ``src`` then reads as zeros. False if not done."""
    global _usable
    if not _usable:
        return False
    flags = MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP
    got = _MREMAP(ctypes.c_void_p(src), length, length, flags, ctypes.c_void_p(dst))
    if got == _FAILED or got != dst:
        _usable = False  # e.g. EINVAL from a kernel without MREMAP_DONTUNMAP: never try again
        return False
    return True
