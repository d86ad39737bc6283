"""liblz4 for the compiled decoder: the address of ``LZ4_decompress_safe``, found once.

Why: LZ4 batches used to be decompressed one by one from Python (frame parsed in Python, one
cramjam call per block, a ``bytes`` per batch kept alive until the record kernel had read it).
For 16 KiB batches that per-batch Python work cost as much as the decompression itself, which is
fast (~1 GB/s here). The kernels now walk Kafka's LZ4 frame themselves and call
``LZ4_decompress_safe`` by address for each block, into the scratch buffer the record decoder
then reads while it is still in cache (as they do for zstd, :mod:`rlm.log._zstd`).
``LZ4_decompress_safe`` is stateless (no context to lend) and bounds-checked on both buffers.

The library is the operating system's ``liblz4.so.1`` (Debian's ``liblz4-1``; cramjam's copy is
Rust and exports nothing). ``RLM_LIBLZ4=off`` uses none (the per-batch Python path, identical
output), a path uses that file. Without a library the Python path decodes every LZ4 batch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

import structlog

log = structlog.get_logger(__name__)

#: Oldest liblz4 accepted: 1.7.0 (2015); ``LZ4_decompress_safe``'s ABI has not changed since r129.
MIN_VERSION = 10700


def open_library(path: str) -> int:
    """The address of ``LZ4_decompress_safe`` in the library at ``path``, or 0 if unusable."""
    try:
        lib = ctypes.CDLL(path)
        version_fn, fn = lib.LZ4_versionNumber, lib.LZ4_decompress_safe
    except (OSError, AttributeError):
        return 0
    version_fn.restype = ctypes.c_int
    if int(version_fn()) < MIN_VERSION:
        return 0
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def find_library() -> int:
    """The address of ``LZ4_decompress_safe`` to use (see the module docstring), or 0."""
    choice = os.environ.get("RLM_LIBLZ4", "").strip()
    if choice.lower() in ("off", "none", "0"):
        return 0
    candidates = [choice] if choice else [ctypes.util.find_library("lz4") or "liblz4.so.1"]
    for path in candidates:
        address = open_library(path)
        if address:
            return address
    log.info("liblz4 not found; lz4 batches are decompressed per batch from Python", tried=candidates)
    return 0


_ADDRESS = -1
_LOCK = threading.Lock()


def decompress_address() -> int:
    """``LZ4_decompress_safe``'s address for this process (found at first use), or 0."""
    global _ADDRESS
    if _ADDRESS < 0:
        with _LOCK:
            if _ADDRESS < 0:
                _ADDRESS = find_library()
    return _ADDRESS
