"""libzstd for the compiled decoder: find a copy, and hand out decompression contexts.

Why: decompressing each batch through a Python call (``zstandard``) costs Python work per batch,
which made zstd decoding ~1.9x the cost of decompression alone. The kernels instead call
``ZSTD_decompressDCtx`` themselves, by address, so a whole group of batches is CRC-checked,
decompressed and decoded in one compiled call.

Where the library comes from, first found wins:

1. ``zstandard``'s CFFI extension (a project dependency; its wheel links libzstd statically and
   exports the ``ZSTD_*`` symbols). It is opened with ``dlopen`` like any shared library, so the
   ``cffi`` package is not needed.
2. The operating system's ``libzstd.so.1`` (Debian's ``libzstd1``).

``RLM_LIBZSTD`` overrides this: ``off`` uses no library (the per-batch Python path), a path uses
that file. Without a library the decoder falls back to the Python path, with identical output.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import importlib.util
import os
import threading
from collections.abc import Callable

import structlog

from rlm.log._contexts import ContextPool

log = structlog.get_logger(__name__)

#: Oldest libzstd accepted: 1.4.0 (2019), the first with a stable ``ZSTD_decompressDCtx`` ABI
#: that every distribution still ships; all we call exists since 1.0.
MIN_VERSION = 10400


@dataclasses.dataclass(frozen=True)
class LibZstd:
    """One loaded libzstd: where it came from and the addresses the kernels call."""

    path: str
    version: int
    decompress_dctx: int  # size_t ZSTD_decompressDCtx(ZSTD_DCtx*, void*, size_t, const void*, size_t)
    _create: Callable[[], int | None]
    _free: Callable[[ctypes.c_void_p], int]

    def create_dctx(self) -> int:
        ptr = self._create()
        if not ptr:
            raise MemoryError("ZSTD_createDCtx returned NULL")
        return int(ptr)

    def free_dctx(self, dctx: int) -> None:
        self._free(ctypes.c_void_p(dctx))


def _wheel_library() -> str | None:
    """Path of ``zstandard``'s CFFI extension, found without importing it (that needs cffi)."""
    try:
        spec = importlib.util.find_spec("zstandard._cffi")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin and os.path.exists(spec.origin) else None


def _os_library() -> str | None:
    return ctypes.util.find_library("zstd") or "libzstd.so.1"


def open_library(path: str) -> LibZstd | None:
    """Load libzstd from ``path`` (a file or a soname); ``None`` if it is not a usable libzstd."""
    try:
        lib = ctypes.CDLL(path)
        version_fn = lib.ZSTD_versionNumber
        create, free, decompress = lib.ZSTD_createDCtx, lib.ZSTD_freeDCtx, lib.ZSTD_decompressDCtx
    except (OSError, AttributeError):
        return None
    version_fn.restype = ctypes.c_uint
    version = int(version_fn())
    if version < MIN_VERSION:
        return None
    create.restype, create.argtypes = ctypes.c_void_p, []
    free.restype, free.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    address = ctypes.cast(decompress, ctypes.c_void_p).value
    if not address:
        return None
    return LibZstd(path, version, int(address), create, free)


def find_library() -> LibZstd | None:
    """The libzstd to use (see the module docstring), or ``None``."""
    choice = os.environ.get("RLM_LIBZSTD", "").strip()
    if choice.lower() in ("off", "none", "0"):
        return None
    candidates = [choice] if choice else [c for c in (_wheel_library(), _os_library()) if c]
    for path in candidates:
        lib = open_library(path)
        if lib is not None:
            return lib
    log.info("libzstd not found; zstd batches are decompressed per batch from Python", tried=candidates)
    return None


class DCtxPool(ContextPool):
    """``ZSTD_DCtx`` contexts of ``lib`` to lend (see :class:`rlm.log._contexts.ContextPool`)."""

    def __init__(self, lib: LibZstd) -> None:
        super().__init__(lib.create_dctx)
        self.lib = lib


_POOL: DCtxPool | None = None
_POOL_LOADED = False
_POOL_LOCK = threading.Lock()


def pool() -> DCtxPool | None:
    """The process-wide context pool of the libzstd found at first use, or ``None`` without one."""
    global _POOL, _POOL_LOADED
    if not _POOL_LOADED:
        with _POOL_LOCK:
            if not _POOL_LOADED:
                lib = find_library()
                _POOL = DCtxPool(lib) if lib is not None else None
                _POOL_LOADED = True
    return _POOL
