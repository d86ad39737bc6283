"""Sequential scans of an offset range to Arrow record batches (Spark's Kafka schema).

The path of bulk readers (``rlm fetch --format arrow``, the HTTP API's Arrow stream, the Spark
source): the segments on the lineage are read chunk by chunk by one
:class:`~fetcher.read_ahead.SequentialRead` (ranged GETs ahead of the decoder, in parallel, into
reused buffers, on into the next segment), each chunk cut at batch boundaries and decoded in place by
:func:`rlm.log.iter_arrow_batches` (compiled loop, not per-record Python). ``read_committed``
drops aborted records using the remote transaction index; control records are never rows.
A segment is checked complete: its bytes must end at its recorded end offset and size.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import pyarrow as pa

from fetcher.batches import check_complete, describe
from fetcher.fetch import IsolationLevel
from fetcher.index_cache import RemoteIndexCache
from fetcher.planning import PartitionPlan, PlannedSegment
from fetcher.read_ahead import Extent, SequentialRead
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
    """Decode one link's offsets ``[rng.start, rng.end)`` to Arrow batches (:func:`scan_ranges`
    of one range: a Spark task's unit).

    read_committed: the aborted transactions overlapping the range are collected from ``plan``
    (this and later links, then ``frontier_aborted``: see
    :meth:`fetcher.transactions.StableOffsets.committed_bound`), unless the caller collected them
    already with the whole plan (``aborted``: a Spark task only carries its own link)."""
    yield from scan_ranges(plan, [rng], reader, indexes, isolation=isolation,
                           min_window_bytes=min_window_bytes, max_batch_rows=max_batch_rows,
                           include_headers=include_headers, frontier_aborted=frontier_aborted,
                           aborted=aborted)


def scan_ranges(plan: PartitionPlan, ranges: Sequence[ScanRange], reader: SegmentReader,
                indexes: RemoteIndexCache, *, isolation: IsolationLevel, min_window_bytes: int = 1 << 20,
                max_batch_rows: int = 65536, include_headers: bool = True,
                frontier_aborted: Sequence[AbortedTxn] = (),
                aborted: Sequence[AbortedTxn] | None = None) -> Iterator[pa.RecordBatch]:
    """Decode ``ranges`` (consecutive links of ``plan``) in order, their bytes read by one
    :class:`~fetcher.read_ahead.SequentialRead`: GETs run ahead of the decoder across segment
    boundaries, and stop (queued ones cancelled, buffers freed) when the caller stops iterating."""
    extents = [_extent(rng, indexes) for rng in ranges]
    stream = reader.sequential(extents)
    try:
        for rng, ext in zip(ranges, extents, strict=True):
            yield from _decode_range(plan, rng, ext.start, stream, indexes, isolation=isolation,
                                     min_window_bytes=min_window_bytes, max_batch_rows=max_batch_rows,
                                     include_headers=include_headers, frontier_aborted=frontier_aborted,
                                     aborted=aborted)
    finally:
        stream.close()


def _extent(rng: ScanRange, indexes: RemoteIndexCache) -> Extent:
    """The bytes of ``rng``'s segment the decoder will read: from the index entry at its start to
    the segment's end, or, when the range ends inside the segment, to the batch after the first
    index entry at or past its end (that entry's batch may still hold offsets below the end). A
    range over the whole segment needs no index: a scan of whole segments GETs only their data."""
    md = rng.link.metadata
    start, stop = 0, md.segment_size_in_bytes
    if rng.start <= md.start_offset and rng.end > md.end_offset:
        return Extent(md, start, stop)
    index = indexes.get(md).offset
    if rng.start > md.start_offset:
        start = index.lookup(rng.start).position
    if rng.end <= md.end_offset and len(index.offsets):
        j = int(np.searchsorted(index.offsets, rng.end, side="left")) + 1
        if j < len(index.offsets):
            stop = max(start, int(index.positions[j]))
    return Extent(md, start, stop)


def _decode_range(plan: PartitionPlan, rng: ScanRange, pos: int, stream: SequentialRead,
                  indexes: RemoteIndexCache, *, isolation: IsolationLevel, min_window_bytes: int,
                  max_batch_rows: int, include_headers: bool, frontier_aborted: Sequence[AbortedTxn],
                  aborted: Sequence[AbortedTxn] | None) -> Iterator[pa.RecordBatch]:
    md = rng.link.metadata
    size = md.segment_size_in_bytes
    if isolation is not IsolationLevel.READ_COMMITTED:
        aborted = []
    elif aborted is None:
        aborted = collect_aborted_txns(plan, rng.link, rng.start, rng.end, indexes, frontier_aborted)
    tp = plan.tp
    name = describe(md)
    last: BatchHeader | None = None
    chunk = stream.chunk
    while pos < size:
        # To the end of pos's chunk: the decoder reads the received chunk in place, no copy. Chunks
        # smaller than min_window_bytes are joined into a window of that size instead (a copy).
        stop = (pos // chunk + 1) * chunk if chunk >= min_window_bytes else pos + min_window_bytes
        stop = min(size, stop)
        data = stream.view(md, pos, stop)
        headers = list(iter_batches(data, verify_crc=False, path=name))
        if not headers:  # the batch at pos runs past the chunk: read exactly it (one copy)
            data = stream.view(md, pos, _entry_end(stream, md, pos, data))
            headers = list(iter_batches(data, verify_crc=False, path=name))
            if not headers:
                raise RemoteSegmentIncompleteError(f"{name}: a batch at position {pos} runs past the "
                                                   f"segment's {size} bytes")
        cut = headers[-1].end_position
        last = replace(headers[-1], position=headers[-1].position + pos)
        dropped = _aborted_ranges(headers, aborted) if aborted else None
        decoded = cast("Generator[pa.RecordBatch, None, None]", iter_arrow_batches(
            data[:cut], topic=tp.topic, partition=tp.partition, max_batch_rows=max_batch_rows,
            start_offset=rng.start, end_offset=rng.end, verify_crc=True, path=name))
        try:
            for batch in decoded:
                if dropped is not None and len(dropped):
                    batch = _drop_offsets(batch, dropped)
                if not include_headers:
                    batch = batch.drop_columns(["headers"]) if "headers" in batch.schema.names else batch
                if batch.num_rows:
                    yield batch
        finally:
            decoded.close()  # its numpy view of the chunk goes before the chunk's buffer is reused
        del data, decoded
        pos += cut
        stream.release_before(md, pos)
        if pos < size and last.last_offset >= rng.end - 1:
            return  # the range ends inside this segment
    check_complete(md, last)


def _entry_end(stream: SequentialRead, md: RemoteLogSegmentMetadata, pos: int, head: memoryview) -> int:
    """Segment position where the entry at ``pos`` ends (from its 12-byte log header)."""
    size = md.segment_size_in_bytes
    if len(head) < LOG_OVERHEAD:
        head = stream.view(md, pos, pos + LOG_OVERHEAD)
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

