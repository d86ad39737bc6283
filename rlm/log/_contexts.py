"""Decompression contexts of a C library, lent one per concurrent decode and kept for reuse.

Why: libzstd's ``ZSTD_DCtx`` and libdeflate's decompressor are not safe to share between two
threads, and creating one per batch would cost more than decompressing a 16 KiB batch. A decoder
takes one for its lifetime and gives it back, so concurrent decodes (threads, or interleaved
generators) never share one. Contexts are never freed: there are at most as many as decodes ever
ran at the same time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ContextPool:
    """Contexts made by ``create`` (an address, never 0), lent and given back."""

    def __init__(self, create: Callable[[], int]) -> None:
        self._create = create
        self._free: list[int] = []
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._create()

    def release(self, context: int) -> None:
        with self._lock:
            self._free.append(context)
