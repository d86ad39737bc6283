"""Kafka's remote fetch semantics over a :class:`~fetcher.planning.PartitionPlan`.

As ``RemoteLogManager.read``: the segment holding the offset on the lineage, the offset index's
floor entry as start position, batches skipped while ``lastOffset < offset``, the first batch
containing the offset returned whole (``minOneMessage``), then more batches up to ``max_bytes``
from that segment only. Unlike Kafka the default result holds whole batches only (Kafka may cut
the last one; ``raw_tail=True`` gives Kafka's exact bytes) and the read is bounded — the end is
known before any byte is requested. ``read_committed`` reads carry the aborted transactions of
this and later segments up to the offset index's upper bound, collected as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from fetcher.batches import Located, WalkLimit, contiguous, walk
from fetcher.index_cache import RemoteIndexCache
from fetcher.isolation import IsolationLevel as IsolationLevel  # re-exported: its old home
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.reader import SegmentReader
from fetcher.transactions import collect_aborted_txns
from rlm.log.records import BatchHeader, Record, iter_records
from rlm.log.txn_index import AbortedTxn
from rlm.types import TopicIdPartition


class RecordViews:
    """A fetch's record bytes as views of the cached chunks, in order, not joined.

    What a server writes to a socket part by part (the Kafka endpoint's ``ResponseFrame``): joining
    a Fetch's records into one ``bytes`` was a copy of every byte served, a third of the endpoint's
    CPU. ``bytes(views)`` joins them for a caller that needs one buffer.
    """

    __slots__ = ("_size", "parts")

    def __init__(self, parts: Sequence[bytes | memoryview]) -> None:
        self.parts: tuple[bytes | memoryview, ...] = tuple(p for p in parts if len(p))
        self._size = sum(len(p) for p in self.parts)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"RecordViews({len(self.parts)} parts, {self._size} bytes)"


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """What a FetchResponse carries for read_committed: producer id and first offset."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Raw batch bytes of one remote read, with the partition's remote range."""

    tp: TopicIdPartition
    fetch_offset: int
    records: bytes
    next_offset: int
    log_start: int
    log_end: int
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    first_batch_offset: int | None
    segment_id: str | None
    batches: int
    last_stable_offset: int | None = None
    #: read_committed: True when the read stopped at the remote LSO because a transaction open at
    #: the remote end could not be decided (no broker log dir known): maybe short of the broker
    stable_limited: bool = False
    #: with ``as_views`` (a server writing them to a socket): the records, not joined; ``records``
    #: is then empty — use ``size``, ``data_records`` or ``bytes(views)``
    views: RecordViews | None = None

    @property
    def size(self) -> int:
        """Bytes of records, joined or not."""
        return len(self.views) if self.views is not None else len(self.records)

    @property
    def empty(self) -> bool:
        return self.size == 0

    def data_records(self, start_offset: int | None = None) -> Iterator[tuple[BatchHeader, Record]]:
        """The data records a consumer sees in this result, in order: those at or after
        ``start_offset`` (default: the fetch offset; the first batch may begin before it), control
        records left out. Every face that prints records walks them here (one batch walker);
        a corrupt batch raises the log reader's typed error naming partition and offset."""
        first = self.fetch_offset if start_offset is None else start_offset
        where = f"{self.tp.topic}-{self.tp.partition}@{self.fetch_offset}"
        data = bytes(self.views) if self.views is not None else self.records
        for h, rec in iter_records(data, path=where):
            if isinstance(rec, Record) and rec.offset >= first:
                yield h, rec


@dataclass(frozen=True, slots=True)
class FetchRequest:
    offset: int
    max_bytes: int
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    leader_epoch: int | None = None
    min_one_message: bool = True
    raw_tail: bool = False
    drop_aborted: bool = False
    sequential: bool = False
    #: read_committed only: records at or past this offset are not returned (the LSO)
    stable_offset: int | None = None
    #: read_committed only: aborted transactions whose marker is past the remote end
    frontier_aborted: tuple[AbortedTxn, ...] = ()
    stable_limited: bool = False
    #: the result's records as :class:`RecordViews` (``FetchResult.views``), not joined
    as_views: bool = False


def fetch_from_plan(plan: PartitionPlan, req: FetchRequest, reader: SegmentReader,
                    indexes: RemoteIndexCache) -> FetchResult:
    """One remote read. Raises the typed errors of :mod:`rlm.errors` (out of range, fenced,
    incomplete segment, deleted segment)."""
    plan.check_leader_epoch(req.leader_epoch, req.offset)
    link: PlannedSegment | None = plan.segment_for(req.offset)
    target = req.offset
    while link is not None:
        target = max(target, link.first)
        if req.stable_offset is not None and target >= req.stable_offset:
            break  # read_committed stops at the LSO, as Kafka's fetch does
        result = _read_link(plan, link, target, req, reader, indexes)
        if result is not None:
            return result
        link = plan.after(link)  # no batch >= target here: Kafka's fall-through to the next segment
    return _empty(plan, req)


def _empty(plan: PartitionPlan, req: FetchRequest) -> FetchResult:
    aborted: tuple[AbortedTransaction, ...] | None = (
        () if req.isolation is IsolationLevel.READ_COMMITTED else None)
    return FetchResult(plan.tp, req.offset, b"", req.offset, plan.log_start, plan.log_end, aborted,
                       None, None, 0, req.stable_offset, req.stable_limited)


def _read_link(plan: PartitionPlan, link: PlannedSegment, target: int, req: FetchRequest,
               reader: SegmentReader, indexes: RemoteIndexCache) -> FetchResult | None:
    md = link.metadata
    idx = indexes.get(md)
    start_pos = idx.offset.lookup(target).position
    last_allowed = link.last if req.stable_offset is None else min(link.last, req.stable_offset - 1)
    nxt = plan.after(link)
    window = max(req.max_bytes, 4096) + 16 * 1024
    taken: list[Located] = []
    size = 0
    first: BatchHeader | None = None
    raw_tail: memoryview | bytes = b""
    limit = WalkLimit()
    for b in walk(reader, md, start_pos, window=window, sequential=req.sequential,
                  next_md=nxt.metadata if nxt else None, limit=limit):
        h = b.header
        if first is None:
            if h.last_offset < target:
                continue
            if h.base_offset > last_allowed:
                return None if h.base_offset > link.last else _empty(plan, req)
            if h.size > req.max_bytes and not req.min_one_message:
                return _empty(plan, req)
            first = h
            if not req.raw_tail:  # the batches after the first are taken while they fit
                limit.end = h.position + max(h.size, req.max_bytes)
        elif h.base_offset > last_allowed or size + h.size > req.max_bytes:
            if req.raw_tail and h.base_offset <= last_allowed and size < req.max_bytes:
                raw_tail = b.data[:req.max_bytes - size]
            break
        taken.append(b)
        size += h.size
    if first is None:  # a gap at the segment's end (the cleaner's): the next segment has the offset
        return None
    last_h = taken[-1].header
    next_offset = last_h.next_offset
    aborted_full: list[AbortedTxn] = []
    aborted: tuple[AbortedTransaction, ...] | None = None
    if req.isolation is IsolationLevel.READ_COMMITTED:
        upper = _upper_bound(idx.offset.offsets, idx.offset.positions, first.position + size, md.end_offset)
        aborted_full = collect_aborted_txns(plan, link, first.base_offset, upper, indexes,
                                            req.frontier_aborted)
        aborted = tuple(AbortedTransaction(a.producer_id, a.first_offset) for a in aborted_full)
    if req.drop_aborted:
        taken = [b for b in taken if not _is_aborted_or_control(b.header, aborted_full)]
        raw_tail = b""
    # the batches are views into the window read (fetcher.batches.walk): joined, that is one copy;
    # as views, none (the server writes them out as they are)
    parts: list[bytes | memoryview] = [*(b.data for b in taken), raw_tail]
    views = RecordViews([*contiguous(taken), raw_tail]) if req.as_views else None
    records = b"" if views is not None else b"".join(parts)
    return FetchResult(plan.tp, req.offset, records, next_offset, plan.log_start, plan.log_end, aborted,
                       first.base_offset, str(md.remote_log_segment_id.id), len(taken), req.stable_offset,
                       req.stable_limited, views)


def _upper_bound(offsets: object, positions: object, end_position: int, end_offset: int) -> int:
    """Kafka's ``OffsetIndex.fetchUpperBoundOffset``: the first entry at or past the bytes
    returned, else the segment's end offset + 1."""
    import numpy as np

    pos = np.asarray(positions)
    i = int(np.searchsorted(pos, end_position, side="left"))
    return int(np.asarray(offsets)[i]) if i < len(pos) else end_offset + 1


def _is_aborted_or_control(h: BatchHeader, aborted: list[AbortedTxn]) -> bool:
    if h.is_control:
        return True
    if not h.is_transactional:
        return False
    return any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
               for a in aborted)
