"""Speculative next reads: after serving a partition up to offset N, read from N at once.

A consumer fetches one request at a time per broker, so without this the remote read of the
next request only starts when that request arrives; with it the read overlaps the response's
transfer and the client's own work. Results are kept only for the exact next request (same
partition, offset, size and isolation), a few seconds, within a byte budget (the requested
sizes of pending reads stay under the read side's ``chunk_cache_bytes``); a miss
simply reads as before. The read itself is the core's ordinary ``RemoteFetcher.fetch``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Executor, Future
from typing import Any

from fetcher.core import RemoteFetcher
from fetcher.fetch import FetchResult, IsolationLevel

_TTL_S = 5.0

Key = tuple[str, int, int, int, int]  # topic, partition, offset, max_bytes, isolation


class Prefetcher:
    def __init__(self, fetcher: RemoteFetcher, executor: Executor, budget_bytes: int) -> None:
        self._fetcher = fetcher
        self._executor = executor
        self._budget = budget_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, tuple[float, Future[FetchResult]]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def take(self, key: Key) -> Future[FetchResult] | None:
        with self._lock:
            got = self._entries.pop(key, None)
            if got is None or time.monotonic() - got[0] > _TTL_S:
                self.misses += 1
                return None
            self.hits += 1
            return got[1]

    def start(self, key: Key, sequential: bool = True) -> None:
        topic, partition, offset, max_bytes, isolation = key
        with self._lock:
            if key in self._entries or max_bytes > self._budget:
                return
            while self._entries and sum(k[3] for k in self._entries) + max_bytes > self._budget:
                _, (_, old) = self._entries.popitem(last=False)
                old.cancel()
            try:
                fut = self._executor.submit(self._read, topic, partition, offset, max_bytes, isolation,
                                             sequential)
            except RuntimeError:  # executor shut down
                return
            self._entries[key] = (time.monotonic(), fut)

    def _read(self, topic: str, partition: int, offset: int, max_bytes: int, isolation: int,
              sequential: bool) -> Any:
        return self._fetcher.fetch(
            topic,
            partition,
            offset,
            max_bytes=max_bytes,
            isolation=IsolationLevel(isolation),
            min_one_message=True,
            sequential=sequential,
            as_views=True,  # what the endpoint writes out, part by part
        )
