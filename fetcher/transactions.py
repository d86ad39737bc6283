"""Transactions on the read side: aborted transactions across segments and the remote LSO.

Aborted transactions are collected as Kafka's ``collectAbortedTransactions`` does: this and later
segments' transaction indexes until an entry's LSO reaches the upper bound (an abort marker can
sit in a later segment than its data). The remote last stable offset bounds read_committed
reads: a transaction whose data is remote but whose marker is not (still local, or not yet
written) is undecided, so read_committed reads stop at its first offset. It comes from the
producer snapshot stored with the last remote segment: the first offsets of the transactions
open at that segment's end. Every copy stores that snapshot (Kafka's and the daemon's), so a
missing one is a lost file and an integrity error naming the segment, never "nothing open": that
would silently raise the LSO past undecided transactions.
"""

from __future__ import annotations

import threading

from fetcher.index_cache import RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from rlm.errors import RemoteResourceNotFoundError, RemoteStorageIntegrityError
from rlm.log.producer_snapshot import parse_snapshot
from rlm.log.txn_index import AbortedTxn, collect_aborted
from rlm.types import IndexType
from rsm_plugins.api import RemoteStorageManager


def collect_aborted_txns(plan: PartitionPlan, link: PlannedSegment, start: int, upper: int,
                         indexes: RemoteIndexCache) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, upper)`` from ``link`` and the links after it."""
    found: list[AbortedTxn] = []
    current: PlannedSegment | None = link
    while current is not None:
        entries, complete = collect_aborted(indexes.get(current.metadata).txn, start, upper)
        found.extend(entries)
        if complete:
            break
        current = plan.after(current)
    return found


class StableOffsets:
    """Remote LSO per partition, from the last segment's producer snapshot (cached by segment)."""

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self._rsm = rsm
        self._lock = threading.Lock()
        self._by_segment: dict[str, int] = {}

    def last_stable_offset(self, plan: PartitionPlan) -> int:
        if not plan.segments:
            return plan.log_end
        last = plan.segments[-1]
        key = str(last.metadata.remote_log_segment_id.id)
        with self._lock:
            cached = self._by_segment.get(key)
        if cached is None:
            cached = self._first_open_txn(last)
            with self._lock:
                self._by_segment[key] = cached
        return min(plan.log_end, cached)

    def _first_open_txn(self, link: PlannedSegment) -> int:
        md = link.metadata
        try:
            with self._rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as stream:
                data = stream.read()
        except RemoteResourceNotFoundError as e:
            raise RemoteStorageIntegrityError(
                f"remote segment {md.remote_log_segment_id} (offsets {md.start_offset}..{md.end_offset}) "
                f"has no producer snapshot in remote storage, so the transactions open at its end, and "
                f"the last stable offset, are unknown: {e}") from e
        opened = [e.current_txn_first_offset for e in parse_snapshot(data, path=f"{md.remote_log_segment_id}")
                  if e.current_txn_first_offset >= 0]
        return min(opened) if opened else md.end_offset + 1
