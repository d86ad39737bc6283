"""Transactions on the read side: aborted transactions across segments and the remote LSO.

Aborted transactions are collected as Kafka's ``collectAbortedTransactions`` does: this and later
segments' transaction indexes until an entry's LSO reaches the upper bound (an abort marker can
sit in a later segment than its data). The remote last stable offset bounds read_committed
reads: a transaction whose data is remote but whose marker is not (still local, or not yet
written) is undecided, so read_committed reads stop at its first offset. It comes from the
producer snapshot stored with the last remote segment: the first offsets of the transactions
open at that segment's end. Where the broker's log dir is known, the outcome of those
transactions is read from it (:mod:`fetcher.frontier`) and the bound is the partition's LSO, as
the broker's own read_committed fetch has it (:meth:`StableOffsets.committed_bound`). Every copy
stores that snapshot (Kafka's and the daemon's), so a missing one is a lost file and an
integrity error naming the segment, never "nothing open": that would silently raise the LSO past
undecided transactions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fetcher.frontier import FrontierSource
from fetcher.index_cache import RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from rlm.errors import RemoteResourceNotFoundError, RemoteStorageIntegrityError
from rlm.log.producer_snapshot import parse_snapshot
from rlm.log.txn_index import AbortedTxn, collect_aborted
from rlm.types import IndexType
from rsm_plugins.api import RemoteStorageManager


def collect_aborted_txns(plan: PartitionPlan, link: PlannedSegment, start: int, upper: int,
                         indexes: RemoteIndexCache,
                         frontier_aborted: Sequence[AbortedTxn] = ()) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, upper)`` from ``link`` and the links after it,
    then, past the remote end, from ``frontier_aborted`` (those whose ABORT marker is not tiered
    yet: :mod:`fetcher.frontier`), as Kafka goes on into local segments. Each transaction once
    (by producer id and first offset, as Kafka's remote read collects them into a set): a compacted
    topic's segment also indexes the aborts whose marker was still local when it was copied
    (:mod:`rlm.daemon.aborts_ahead`), so the marker's segment or the frontier may name it again."""
    found: dict[tuple[int, int], AbortedTxn] = {}

    def add(entries: Iterable[AbortedTxn]) -> None:
        for e in entries:
            found.setdefault((e.producer_id, e.first_offset), e)

    current: PlannedSegment | None = link
    while current is not None:
        entries, complete = collect_aborted(indexes.get(current.metadata).txn, start, upper)
        add(entries)
        if complete:
            return list(found.values())
        current = plan.after(current)
    add(a for a in frontier_aborted if a.last_offset >= start and a.first_offset < upper)
    return list(found.values())


@dataclass(frozen=True, slots=True)
class CommittedBound:
    """How far read_committed readers may read the remote tier, and what they must know to do it."""

    stable_offset: int
    """Exclusive bound on remote offsets for read_committed (at most the remote log end)."""
    frontier_aborted: tuple[AbortedTxn, ...]
    """Aborted transactions whose data is tiered and whose marker is not (yet)."""
    limited: bool
    """True when a transaction open at the remote end could not be decided (no frontier source):
    the bound is the remote LSO, possibly short of what the broker serves."""


class StableOffsets:
    """Remote LSO per partition, from the last segment's producer snapshot (cached by segment),
    and the read_committed bound with the frontier's facts when a source knows them."""

    def __init__(self, rsm: RemoteStorageManager, frontier: FrontierSource | None = None) -> None:
        self._rsm = rsm
        self._sources: list[FrontierSource] = [frontier] if frontier is not None else []
        self._lock = threading.Lock()
        self._by_segment: dict[str, int] = {}

    def committed_bound(self, plan: PartitionPlan) -> CommittedBound:
        """The remote LSO when nothing is open at the remote end; else the partition's LSO (capped
        at the remote end) with the frontier's aborted transactions; else the remote LSO, limited."""
        remote_lso = self.last_stable_offset(plan)
        if remote_lso >= plan.log_end:
            return CommittedBound(plan.log_end, (), False)
        found = None
        for source in list(self._sources):  # the log dir first (no round trip), then the broker
            found = source.frontier(plan.tp, plan.log_end - 1)
            if found is not None:
                break
        if found is None:
            return CommittedBound(remote_lso, (), True)
        return CommittedBound(max(remote_lso, min(plan.log_end, found.last_stable_offset)),
                              found.aborted, False)

    def add_source(self, source: FrontierSource) -> None:
        self._sources.append(source)

    def remove_source(self, source: FrontierSource) -> None:
        if source in self._sources:
            self._sources.remove(source)

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
