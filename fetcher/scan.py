"""Sequential scans of an offset range to Arrow record batches (Spark's Kafka schema).

The path of bulk readers (``rlm fetch --format arrow``, the HTTP API's Arrow stream, the Spark
source): each segment on the lineage is read in large windows through the chunk cache with
read-ahead into the next segment, cut at batch boundaries and decoded by
:func:`rlm.log.iter_arrow_batches` (compiled loop, not per-record Python). ``read_committed``
drops aborted records using the remote transaction index; control records are never rows.
A segment is checked complete: its bytes must end at its recorded end offset and size.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from fetcher.batches import check_complete, describe
from fetcher.fetch import IsolationLevel
from fetcher.index_cache import RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.reader import SegmentReader
from fetcher.transactions import collect_aborted_txns
from rlm.errors import RemoteSegmentIncompleteError
from rlm.log.arrow import iter_arrow_batches
from rlm.log.model import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_ENTRY_SIZE
from rlm.log.offset_index import OffsetIndex
from rlm.log.records import BatchHeader, iter_batches
from rlm.log.txn_index import AbortedTxn
from rlm.types import RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class ScanRange:
    """Offsets ``[start, end)`` of one link to decode (the unit a Spark task reads)."""

    link: PlannedSegment
    start: int
    end: int


def plan_scan(plan: PartitionPlan, start: int, end: int) -> list[ScanRange]:
    """The links covering ``[start, end)``, trimmed (both clamped to the remote range)."""
    start = max(start, plan.log_start)
    end = min(end, plan.log_end)
    out = []
    for link in plan.segments:
        lo, hi = max(start, link.first), min(end, link.last + 1)
        if lo < hi:
            out.append(ScanRange(link, lo, hi))
    return out


def split_scan_range(rng: ScanRange, index: OffsetIndex, split_bytes: int) -> list[ScanRange]:
    """Cut ``rng`` on its segment's offset-index entries into pieces of about ``split_bytes`` of
    segment data (the unit of a Spark task: a large segment becomes several)."""
    md = rng.link.metadata
    if md.segment_size_in_bytes <= split_bytes:
        return [rng]
    offsets, positions = index.offsets, index.positions
    p0 = index.lookup(rng.start).position
    p1 = (index.lookup(rng.end).position if rng.end <= md.end_offset else md.segment_size_in_bytes)
    if p1 - p0 <= split_bytes or not len(offsets):
        return [rng]
    cuts = []
    target = p0 + split_bytes
    for i in range(int(np.searchsorted(positions, target)), len(offsets)):
        off = int(offsets[i])
        if off <= rng.start or off >= rng.end:
            continue
        if int(positions[i]) >= target:
            cuts.append(off)
            target = int(positions[i]) + split_bytes
    bounds = [rng.start, *cuts, rng.end]
    return [ScanRange(rng.link, a, b) for a, b in itertools.pairwise(bounds) if a < b]


def scan_range(plan: PartitionPlan, rng: ScanRange, reader: SegmentReader, indexes: RemoteIndexCache, *,
               isolation: IsolationLevel, min_window_bytes: int = 1 << 20, max_batch_rows: int = 65536,
               include_headers: bool = True, frontier_aborted: Sequence[AbortedTxn] = (),
               aborted: Sequence[AbortedTxn] | None = None) -> Iterator[pa.RecordBatch]:
    """Decode one link's offsets ``[rng.start, rng.end)`` to Arrow batches.

    read_committed: the aborted transactions overlapping the range are collected from ``plan``
    (this and later links, then ``frontier_aborted``: see
    :meth:`fetcher.transactions.StableOffsets.committed_bound`), unless the caller collected them
    already with the whole plan (``aborted``: a Spark task only carries its own link)."""
    md = rng.link.metadata
    idx = indexes.get(md)
    pos = idx.offset.lookup(rng.start).position
    nxt = plan.after(rng.link)
    size = md.segment_size_in_bytes
    if isolation is not IsolationLevel.READ_COMMITTED:
        aborted = []
    elif aborted is None:
        aborted = collect_aborted_txns(plan, rng.link, rng.start, rng.end, indexes, frontier_aborted)
    tp = plan.tp
    name = describe(md)
    last: BatchHeader | None = None
    next_md = nxt.metadata if nxt else None
    chunk = reader.chunk_bytes
    while pos < size:
        # To the end of pos's chunk: the decoder reads the cached chunk in place, no copy. Chunks
        # smaller than min_window_bytes are joined into a window of that size instead (a copy).
        stop = (pos // chunk + 1) * chunk if chunk >= min_window_bytes else pos + min_window_bytes
        stop = min(size, stop)
        data = reader.read_view(md, pos, stop, next_md=next_md)
        headers = list(iter_batches(data, verify_crc=False, path=name))
        if not headers:  # the batch at pos runs past the chunk: read exactly it (one copy)
            data = reader.read_view(md, pos, _entry_end(reader, md, pos, data), next_md=next_md)
            headers = list(iter_batches(data, verify_crc=False, path=name))
            if not headers:
                raise RemoteSegmentIncompleteError(f"{name}: a batch at position {pos} runs past the "
                                                   f"segment's {size} bytes")
        cut = headers[-1].end_position
        last = replace(headers[-1], position=headers[-1].position + pos)
        view = data[:cut]
        dropped = _aborted_ranges(headers, aborted) if aborted else None
        for batch in iter_arrow_batches(view, topic=tp.topic, partition=tp.partition,
                                        max_batch_rows=max_batch_rows, start_offset=rng.start,
                                        end_offset=rng.end, verify_crc=True, path=name):
            if dropped is not None and len(dropped):
                batch = _drop_offsets(batch, dropped)
            if not include_headers:
                batch = batch.drop_columns(["headers"]) if "headers" in batch.schema.names else batch
            if batch.num_rows:
                yield batch
        pos += cut
        if pos < size and last.last_offset >= rng.end - 1:
            return  # the range ends inside this segment
    check_complete(md, last)


def _entry_end(reader: SegmentReader, md: RemoteLogSegmentMetadata, pos: int, head: memoryview) -> int:
    """Segment position where the entry at ``pos`` ends (from its 12-byte log header)."""
    size = md.segment_size_in_bytes
    if len(head) < LOG_OVERHEAD:
        head = reader.read_view(md, pos, pos + LOG_OVERHEAD)
    if len(head) < LOG_OVERHEAD:
        raise RemoteSegmentIncompleteError(
            f"{describe(md)}: a batch at position {pos} runs past the segment's {size} bytes")
    length = int.from_bytes(head[8:12], "big", signed=True)
    if length < MIN_ENTRY_SIZE:  # nonsense: the batch parser names it and its position
        return min(size, pos + LOG_OVERHEAD + HEADER_SIZE_UP_TO_MAGIC)
    if pos + LOG_OVERHEAD + length > size:
        raise RemoteSegmentIncompleteError(
            f"{describe(md)}: a batch at position {pos} runs past the segment's {size} bytes")
    return pos + LOG_OVERHEAD + length


def _aborted_ranges(headers: list[BatchHeader], aborted: Sequence[AbortedTxn]) -> np.ndarray:
    """(first, last) offset pairs of the aborted data batches among ``headers``."""
    out = []
    for h in headers:
        if h.is_transactional and not h.is_control and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                for a in aborted):
            out.append((h.base_offset, h.last_offset))
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def _drop_offsets(batch: pa.RecordBatch, ranges: np.ndarray) -> pa.RecordBatch:
    offsets = batch.column("offset").to_numpy()
    i = np.searchsorted(ranges[:, 0], offsets, side="right") - 1
    inside = (i >= 0) & (offsets <= ranges[np.maximum(i, 0), 1])
    if not inside.any():
        return batch
    return batch.filter(pa.array(~inside))

