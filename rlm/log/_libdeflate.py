"""libdeflate for the compiled decoder: find a copy, and hand out decompressors.

Why: gzip batches were inflated one by one from Python by zlib, then decoded by the record kernel.
zlib's inflate was most of the time (a gzip segment decoded at ~0.8x of inflating it alone, and
only ~6x kafka-python, which inflates with the same zlib). libdeflate inflates the same streams
about twice as fast (its decoder is built for whole buffers, not streaming), and called by address
from the compiled loop it writes into the scratch buffer the record decoder then reads while it is
still in cache, as libzstd and liblz4 do (:mod:`rlm.log._zstd`, :mod:`rlm.log._lz4`).

The kernels call ``libdeflate_gzip_decompress_ex`` for a batch whose payload is one gzip member
(what Kafka's Java producer, librdkafka and kafka-python write), sized by the member's ISIZE
trailer; libdeflate checks the member's CRC-32 and ISIZE. Anything else (several members, a
member not ending the payload, an ISIZE over the decompression cap, any libdeflate error) goes to
the per-batch Python path, which decodes it or raises the typed error, so output and errors are
those of the Python path.

The library is the operating system's ``libdeflate.so.0`` (Debian's ``libdeflate0``).
``RLM_LIBDEFLATE=off`` uses none, a path uses that file. Without one the Python path (zlib)
decodes every gzip batch, with identical output.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import os
from collections.abc import Callable

import structlog

from rlm.log._contexts import ContextPool

log = structlog.get_logger(__name__)

#: ``enum libdeflate_result``'s success value.
SUCCESS = 0


@dataclasses.dataclass(frozen=True)
class LibDeflate:
    """One loaded libdeflate: where it came from and the address the kernels call."""

    path: str
    #: enum libdeflate_result libdeflate_gzip_decompress_ex(struct libdeflate_decompressor *,
    #:     const void *in, size_t in_nbytes, void *out, size_t out_nbytes_avail,
    #:     size_t *actual_in_nbytes_ret, size_t *actual_out_nbytes_ret)
    gzip_decompress_ex: int
    _alloc: Callable[[], int | None]

    def alloc_decompressor(self) -> int:
        ptr = self._alloc()
        if not ptr:
            raise MemoryError("libdeflate_alloc_decompressor returned NULL")
        return int(ptr)


def open_library(path: str) -> LibDeflate | None:
    """Load libdeflate from ``path`` (a file or a soname); ``None`` if it is not a usable one."""
    try:
        lib = ctypes.CDLL(path)
        alloc, gzip_ex = lib.libdeflate_alloc_decompressor, lib.libdeflate_gzip_decompress_ex
    except (OSError, AttributeError):
        return None
    alloc.restype, alloc.argtypes = ctypes.c_void_p, []
    address = ctypes.cast(gzip_ex, ctypes.c_void_p).value
    return LibDeflate(path, int(address), alloc) if address else None


def find_library() -> LibDeflate | None:
    """The libdeflate to use (see the module docstring), or ``None``."""
    choice = os.environ.get("RLM_LIBDEFLATE", "").strip()
    if choice.lower() in ("off", "none", "0"):
        return None
    candidates = [choice] if choice else [ctypes.util.find_library("deflate") or "libdeflate.so.0"]
    for path in candidates:
        lib = open_library(path)
        if lib is not None:
            return lib
    log.info("libdeflate not found; gzip batches are inflated per batch from Python", tried=candidates)
    return None


class DecompressorPool(ContextPool):
    """libdeflate decompressors of ``lib`` to lend (see :class:`rlm.log._contexts.ContextPool`)."""

    def __init__(self, lib: LibDeflate) -> None:
        super().__init__(lib.alloc_decompressor)
        self.lib = lib


@functools.cache
def pool() -> DecompressorPool | None:
    """The process-wide decompressor pool of the libdeflate found at first use, or ``None``."""
    lib = find_library()
    return DecompressorPool(lib) if lib is not None else None
