"""Merged mode's answer for transactions open at the remote end: ask the broker.

A transaction can start in the last tiered segment and end in a segment only the broker holds.
Without the broker's log dir the read core would stop read_committed reads at the remote LSO, and
a merged-mode consumer would wait there (the broker has no records below its local log start to
forward it to). The broker knows the outcome: a read_committed Fetch at the remote end answers the
partition's LSO and the aborted transactions overlapping the fetched range — Kafka collects them
from the transaction indexes of every later segment until it finds one complete, so an aborted
transaction whose data is tiered and whose marker is local is listed with its first offset.
Transactions open at the remote end and not listed committed (or are still open, and then the
broker's LSO is at or below the remote end). One small Fetch per partition, cached a second.
"""

from __future__ import annotations

import asyncio
import threading
import time

import structlog
from kio.schema.errors import ErrorCode

from fetcher import AbortedTxn, Frontier
from fetcher.kafka.forward import BrokerForwarder
from rlm.types import TopicIdPartition

log = structlog.get_logger(__name__)

_TTL_S = 1.0
_READ_COMMITTED = 1


class BrokerFetchFrontier:
    """A :class:`fetcher.FrontierSource` backed by the merged-mode forwarder (which lives on the
    endpoint's event loop: calls from reader threads hop onto it; a call on the loop itself, which
    must not block, answers "unknown")."""

    def __init__(self, forwarder: BrokerForwarder, loop: asyncio.AbstractEventLoop,
                 timeout_s: float = 10.0) -> None:
        self._forwarder = forwarder
        self._loop = loop
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._cache: dict[tuple[TopicIdPartition, int], tuple[float, Frontier | None]] = {}

    def frontier(self, tp: TopicIdPartition, remote_end: int) -> Frontier | None:
        key = (tp, remote_end)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < _TTL_S:
                return hit[1]
        try:
            if asyncio.get_running_loop() is self._loop:
                return None
        except RuntimeError:
            pass  # a reader thread: no loop of its own
        if self._loop.is_closed():
            return None
        try:
            found = asyncio.run_coroutine_threadsafe(self._ask(tp, remote_end + 1), self._loop).result(
                self._timeout_s)
        except Exception as e:  # the broker is away: unknown, readers stop at the remote LSO
            log.warning("frontier_broker_unavailable", topic=tp.topic, partition=tp.partition,
                        error=f"{type(e).__name__}: {e}")
            return None
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < _TTL_S}
            self._cache[key] = (now, found)
        return found

    async def _ask(self, tp: TopicIdPartition, log_end: int) -> Frontier | None:
        got = await self._forwarder.fetch(tp.topic, tp.partition, log_end, 1, _READ_COMMITTED, 0)
        if got.error is not ErrorCode.none:
            # OFFSET_OUT_OF_RANGE: the broker's log no longer reaches back to the remote end
            log.warning("frontier_unknown", topic=tp.topic, partition=tp.partition, remote_end=log_end,
                        broker_error=got.error.name)
            return None
        if got.last_stable_offset <= log_end:
            # still open at the broker: a Fetch at or past its LSO lists no aborts, so the outcome
            # of the others open at the remote end is unknown here; stop at the remote LSO
            return None
        aborted = tuple(sorted(
            (AbortedTxn(pid, first, log_end, got.last_stable_offset)
             for pid, first in (got.aborted or ()) if first < log_end),
            key=lambda a: a.first_offset))
        return Frontier(got.last_stable_offset, aborted, "broker")
