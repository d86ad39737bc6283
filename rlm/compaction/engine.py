"""Compact a range of segments the way Kafka's log cleaner would, into one new segment.

The steps follow ``Cleaner.clean``/``doClean`` (``LogCleaner.scala``; ``Cleaner.java`` in 4.x):

1. **Cleanable range** (``LogCleanerManager.cleanableOffsets``): the input segments in order, up
   to the first one holding a record younger than ``min.compaction.lag.ms``; the rest are left
   alone (:attr:`CompactionResult.segments_used` says how many were compacted).
2. **Offset map** (``buildOffsetMap``): key -> latest offset of the keyed records of
   non-aborted data batches at or above the dirty offset, in a bounded map
   (:class:`~rlm.compaction.offset_map.OffsetMap`). When the map fills, Kafka's cleaner cleans
   up to there and leaves the rest for a later run; here the engine runs another **pass** over
   the remainder at once, so one call always compacts the whole range: each pass removes the
   records its map supersedes, and the passes' keep-masks are intersected.
3. **Retention** (``shouldRetainRecord`` and the filter's ``checkBatchRetention``): a record
   past the map's latest offset stays; a keyless one goes; a keyed one stays if it is its key's
   latest and has a value or its batch's delete horizon has not passed. A key in
   :class:`~rlm.compaction.newer_keys.NewerKeys` loses all its records here. Aborted batches lose
   their records, markers go once their transaction is empty and their horizon passed
   (:mod:`rlm.compaction.transactions`), each active producer's last batch is kept, empty if need be.
4. **Output** (``MemoryRecords.filterTo``): an untouched batch is copied byte for byte; one that
   lost records or needs its delete horizon (KIP-534: tombstones or an empty transaction's marker,
   horizon = now + ``delete.retention.ms``, attribute bit 0x40, first-timestamp field) is
   re-framed with its codec (:mod:`rlm.compaction.reframe`); a fully removed batch that must stay
   becomes the 61-byte empty header (``DefaultRecordBatch.writeEmptyHeader``).

Per-record work is compiled (digests, map, keep-masks, re-framing) or vectorised with numpy;
Python loops per batch and per segment.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import structlog

from rlm.compaction.digest import KeyDigests, digest_keys
from rlm.compaction.errors import InvalidCompactionInput
from rlm.compaction.newer_keys import NewerKeys
from rlm.compaction.offset_map import OffsetMap
from rlm.compaction.output import SegmentFiles, write_segment
from rlm.compaction.reframe import NO_BASE, reframe_records
from rlm.compaction.settings import CompactionSettings
from rlm.compaction.transactions import (
    ProducerLast,
    TransactionWalk,
    aborted_from_markers,
    producers_from,
)
from rlm.errors import CorruptRecordError, LogFormatError
from rlm.log import codecs
from rlm.log.arrow import read_arrow
from rlm.log.encode import assemble_batch, encode_empty_batch
from rlm.log.model import ATTR_DELETE_HORIZON, Compression, TimestampType
from rlm.log.records import BatchHeader, decode_control_records, iter_batches
from rlm.log.txn_index import AbortedTxn

__all__ = ["CompactionInput", "CompactionResult", "compact", "compact_to_batches"]

log = structlog.get_logger(__name__)
Arr = np.ndarray[Any, Any]
Progress = Callable[["CompactionResult"], None]
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class CompactionInput:
    """What to compact.

    ``segments``: ``.log`` files (paths named ``<base offset>.log``) or their bytes, in offset
    order. ``aborted``: the aborted transactions overlapping them (from every ``.txnindex`` that
    covers the range, including later segments', as ``UnifiedLog.collectAbortedTransactions``).
    The input's own ABORT markers are added to ``aborted``; a transaction whose marker lies
    beyond the input still needs its entry here. ``producers``: the active producers' last state
    (from the producer snapshot); None derives it from the segments. ``newer_keys``: keys written
    after the range. ``dirty_offset``: records below it were compacted before and are not put in
    the offset map (Kafka's cleaner checkpoint). ``upper_bound``: the offset the input range ends
    at (Kafka's ``firstUncleanableOffset``, the next segment's base offset); None: the next offset
    of the last input's last batch. The batch ending there is kept, empty if need be, as Kafka's
    cleaner keeps the last batch of a cleaning round "so that last offset information is not lost"
    (``Cleaner.cleanInto``, ``upperBoundOffsetOfCleaningRound``); when ``min.compaction.lag.ms``
    stops the compaction early, the bound is the base offset of the first segment left out.
    """

    segments: Sequence[str | Path | bytes]
    aborted: Sequence[AbortedTxn] = ()
    producers: Mapping[int, ProducerLast] | None = None
    newer_keys: NewerKeys | None = None
    dirty_offset: int = 0
    upper_bound: int | None = None


@dataclass
class CompactionResult:
    """What a compaction did; ``files`` is None for :func:`compact_to_batches`."""

    base_offset: int
    end_offset: int  # one past the last offset of the compacted segments
    segments_used: int
    passes: int = 0
    phase: str = "prepare"  # prepare -> map (pass by pass) -> write -> done
    records_mapped: int = 0  # records the passes' maps have covered so far (progress)
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    batches_copied: int = 0
    batches_reframed: int = 0
    batches_emptied: int = 0
    batches_removed: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    map_memory_bytes: int = 0
    reindexed: list[AbortedTxn] = field(default_factory=list)
    files: SegmentFiles | None = None
    seconds: float = 0.0


@dataclass
class _Segment:
    """One input segment: its batch headers, per-batch decisions and per-record keep-mask."""

    source: str | Path | bytes
    base_offset: int
    headers: list[BatchHeader]
    data_batches: Arr  # indices into headers of data batches with records
    data_last: Arr  # their last offsets
    record_start: Arr  # first record index of each data batch
    n_records: int
    can_discard: Arr = field(default_factory=lambda: np.zeros(0, np.bool_))  # per header
    control_kind: list[int | None] = field(default_factory=list)
    keep: Arr = field(default_factory=lambda: np.zeros(0, np.bool_))  # per record
    tombstone: Arr | None = None  # per record: null value (filled by the first decode)
    size: int = 0

    def read(self) -> bytes:
        if isinstance(self.source, bytes):
            return self.source
        return Path(self.source).read_bytes()


@dataclass
class _Records:
    """Per-record columns a pass needs (cached between its map and filter phases)."""

    offsets: Arr
    digests: KeyDigests
    has_value: Arr
    batch: Arr  # index into _Segment.data_batches


def _base_from_name(source: str | Path | bytes) -> int | None:
    if isinstance(source, bytes):
        return None
    stem = Path(source).name.removesuffix(".log")
    return int(stem) if stem.isdigit() else None


def _load(source: str | Path | bytes) -> _Segment:
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    name = None if isinstance(source, bytes) else str(source)
    headers = list(iter_batches(data, path=name, verify_crc=True))
    legacy = next((h for h in headers if h.magic < 2), None)
    if legacy is not None:
        raise InvalidCompactionInput(f"{name or '<bytes>'}: batch at position {legacy.position} has magic "
                                     f"{legacy.magic}; compaction handles magic 2 batches only")
    base = _base_from_name(source)
    if base is None:
        base = headers[0].base_offset if headers else 0
    with_records = [i for i, h in enumerate(headers) if not h.is_control and h.records_count > 0]
    data_idx = np.array(with_records, np.int64)
    counts = np.array([headers[i].records_count for i in data_idx], np.int64)
    starts = np.zeros(len(data_idx), np.int64)
    if len(counts):
        starts[1:] = np.cumsum(counts)[:-1]
    last = np.array([headers[i].last_offset for i in data_idx], np.int64)
    seg = _Segment(source, base, headers, data_idx, last, starts, int(counts.sum()), size=len(data))
    seg.keep = np.ones(seg.n_records, np.bool_)
    kinds: list[int | None] = []
    for h in headers:
        if h.is_control and h.records_count > 0:
            recs = decode_control_records(data[h.position:h.end_position], path=name, position=h.position)
            kinds.append(int(recs[0].type) if recs else None)
        else:
            kinds.append(None)
    seg.control_kind = kinds
    return seg


def _cleanable(segments: list[_Segment], settings: CompactionSettings, now_ms: int) -> int:
    """How many leading segments may be compacted: none younger than ``min.compaction.lag.ms``
    (``LogCleanerManager.cleanableOffsets``), and, like ``groupSegmentsBySize``, no more than one
    segment can hold: relative offsets and file positions in the indexes are 32-bit."""
    horizon = now_ms - settings.min_compaction_lag_ms
    first_base = segments[0].base_offset if segments else 0
    size = 0
    for i, seg in enumerate(segments):
        size += seg.size
        if i and size > INT32_MAX:
            return i
        if not seg.headers:
            continue
        if max(h.max_timestamp for h in seg.headers) > horizon:
            return i
        if seg.headers[-1].last_offset - first_base > INT32_MAX:
            return i
    return len(segments)


def _decode(seg: _Segment) -> _Records:
    source = seg.source if isinstance(seg.source, bytes) else str(seg.source)  # files: read in windows
    table = read_arrow(source, topic="", partition=0, verify_crc=False)
    if table.num_rows != seg.n_records:
        raise LogFormatError(f"decoded {table.num_rows} records, the batch headers count {seg.n_records}",
                             path=None if isinstance(seg.source, bytes) else seg.source)
    offsets = table.column("offset").to_numpy().astype(np.int64, copy=False)
    value = table.column("value")
    has_value = value.is_valid().to_numpy(zero_copy_only=False) if table.num_rows else np.zeros(0, np.bool_)
    counts = np.array([seg.headers[int(i)].records_count for i in seg.data_batches], np.int64)
    batch = np.repeat(np.arange(len(seg.data_batches), dtype=np.int64), counts)
    _check_offsets(seg, offsets, batch)
    keys: pa.Array | pa.ChunkedArray = table.column("key")
    return _Records(offsets, digest_keys(keys), np.asarray(has_value, np.bool_), batch)


def _check_offsets(seg: _Segment, offsets: Arr, batch: Arr) -> None:
    """Record offsets must rise strictly and stay inside their batch's [base, last] (a record whose
    offset delta disagrees with its header would otherwise be kept or dropped for another's key)."""
    if not len(offsets):
        return
    base = np.array([seg.headers[int(i)].base_offset for i in seg.data_batches], np.int64)
    inside = (offsets >= base[batch]) & (offsets <= seg.data_last[batch])
    rising = bool((np.diff(offsets) > 0).all())
    if not (rising and bool(inside.all())):
        bad = int(np.argmin(inside)) if not bool(inside.all()) else int(np.argmin(np.diff(offsets) > 0)) + 1
        h = seg.headers[int(seg.data_batches[int(batch[bad])])]
        where = None if isinstance(seg.source, bytes) else seg.source
        raise CorruptRecordError(f"record offset {int(offsets[bad])} does not fit its batch "
                                 f"[{h.base_offset}, {h.last_offset}] or does not follow the previous record",
                                 path=where, position=h.position)


def _all_aborted(segments: list[_Segment], given: Sequence[AbortedTxn]) -> list[AbortedTxn]:
    """The caller's aborted transactions plus those the input's own ABORT markers show (a
    transaction in both is queued twice and taken once: the walk keys them by producer)."""
    pairs = ((h, seg.control_kind[i]) for seg in segments for i, h in enumerate(seg.headers))
    derived = aborted_from_markers(pairs)
    known = {(t.producer_id, t.last_offset) for t in given}
    return [*given, *(t for t in derived if (t.producer_id, t.last_offset) not in known)]


def _walk_transactions(segments: list[_Segment], aborted: Sequence[AbortedTxn]) -> list[AbortedTxn]:
    walk = TransactionWalk(aborted)
    for seg in segments:
        flags = np.zeros(len(seg.headers), np.bool_)
        for i, h in enumerate(seg.headers):
            flags[i] = walk.control_batch(h, seg.control_kind[i]) if h.is_control else walk.data_batch(h)
        seg.can_discard = flags
    return walk.reindexed


def _retain_deletes(seg: _Segment, now_ms: int) -> Arr:
    """Per data batch: may its tombstones stay (no delete horizon yet, or not passed)?"""
    out = np.ones(len(seg.data_batches), np.bool_)
    for j, i in enumerate(seg.data_batches):
        h = seg.headers[int(i)]
        if h.has_delete_horizon and now_ms >= h.base_timestamp:
            out[j] = False
    return out


def _passes(segments: list[_Segment], inp: CompactionInput, settings: CompactionSettings,
            now_ms: int, result: CompactionResult, progress: Progress | None) -> None:
    """Build the offset map pass by pass and AND each pass's retention into the keep-masks."""
    result.phase = "map"
    omap = OffsetMap(settings.offset_map_memory_bytes, load_factor=settings.load_factor)
    result.map_memory_bytes = omap.memory_bytes
    cache: dict[int, _Records] = {}
    budget = settings.record_cache_records

    def records(k: int) -> _Records:
        nonlocal budget
        got = cache.get(k)
        if got is None:
            got = _decode(segments[k])
            if segments[k].tombstone is None:
                segments[k].tombstone = ~got.has_value
            if segments[k].n_records <= budget:
                cache[k] = got
                budget -= segments[k].n_records
        return got

    usable_batch = [~seg.can_discard[seg.data_batches] for seg in segments]  # aborted batches: not in map
    retain_deletes = [_retain_deletes(seg, now_ms) for seg in segments]
    cursor_seg, cursor_rec = 0, 0
    while cursor_seg < len(segments):
        if cursor_rec >= segments[cursor_seg].n_records:
            cursor_seg, cursor_rec = cursor_seg + 1, 0
            continue
        omap.clear(int(records(cursor_seg).offsets[cursor_rec]))
        k, full = cursor_seg, False
        while k < len(segments) and not full:
            recs = records(k)
            start = cursor_rec if k == cursor_seg else 0
            use = usable_batch[k][recs.batch[start:]] & (recs.offsets[start:] >= inp.dirty_offset)
            part = KeyDigests(recs.digests.hi[start:], recs.digests.lo[start:], recs.digests.has_key[start:])
            consumed = omap.put_all(part, recs.offsets[start:], use)
            result.records_mapped += consumed
            if start + consumed < segments[k].n_records:
                cursor_seg, cursor_rec, full = k, start + consumed, True
            else:
                k += 1
        if not full:
            cursor_seg, cursor_rec = len(segments), 0
        result.passes += 1
        latest = omap.latest_offset
        for k, seg in enumerate(segments):
            if seg.n_records == 0:
                continue
            # segments from the first that starts after the map's range are untouched by this pass;
            # one the pass ended inside (even inside its first batch) is pruned up to ``latest``
            if latest < 0 or seg.headers[int(seg.data_batches[0])].base_offset > latest:
                break
            recs = records(k)
            found = omap.get_all(recs.digests)
            keyed_latest = recs.digests.has_key & (recs.offsets >= found)
            alive = recs.has_value | retain_deletes[k][recs.batch]
            seg.keep &= (recs.offsets > latest) | (keyed_latest & alive)
        log.debug("compaction pass", pass_no=result.passes, keys=omap.size, latest_offset=latest)
        if progress is not None:
            progress(result)
    if inp.newer_keys is not None and len(inp.newer_keys):
        for k, seg in enumerate(segments):
            if seg.n_records:
                recs = records(k)
                seg.keep &= ~(inp.newer_keys.contains(recs.digests) & recs.digests.has_key)


def _rebuild(data: bytes, h: BatchHeader, keep: Arr, horizon: int | None) -> bytes:
    """``buildRetainedRecordsInto``: the batch with only ``keep``'s records, same codec."""
    payload: bytes | memoryview = memoryview(data)[h.position + 61:h.end_position]
    if h.compression != Compression.NONE:
        payload = codecs.decompress(h.compression, payload, position=h.position)
    log_append = h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    raw, base_ts, max_ts, kept = reframe_records(
        payload, h.records_count, keep, old_base_timestamp=h.base_timestamp, log_append_time=log_append,
        new_base_timestamp=NO_BASE if horizon is None else horizon)
    body = codecs.compress(h.compression, raw) if h.compression != Compression.NONE else raw
    attributes = h.attributes & ~ATTR_DELETE_HORIZON
    if horizon is not None:
        attributes |= ATTR_DELETE_HORIZON
    return assemble_batch(
        base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch, attributes=attributes,
        last_offset_delta=h.last_offset_delta, base_timestamp=base_ts,
        max_timestamp=log_append if log_append is not None else max_ts, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, count=kept, payload=body)


def _empty(h: BatchHeader) -> bytes:
    return encode_empty_batch(
        base_offset=h.base_offset, last_offset_delta=h.last_offset_delta, max_timestamp=h.max_timestamp,
        partition_leader_epoch=h.partition_leader_epoch, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, timestamp_type=h.timestamp_type,
        is_transactional=h.is_transactional, is_control=h.is_control)


def _output(segments: list[_Segment], producers: Mapping[int, ProducerLast], settings: CompactionSettings,
            now_ms: int, result: CompactionResult, upper_bound: int) -> Iterator[bytes]:
    """``MemoryRecords.filterTo`` over every batch, with the decisions made above."""
    new_horizon = now_ms + settings.delete_retention_ms
    for seg in segments:
        data = seg.read()
        tombstones = seg.tombstone if seg.tombstone is not None else np.zeros(seg.n_records, np.bool_)
        data_pos = {int(i): j for j, i in enumerate(seg.data_batches)}
        for i, h in enumerate(seg.headers):
            can_discard = bool(seg.can_discard[i])
            horizon_passed = h.has_delete_horizon and now_ms >= h.base_timestamp
            discard_records = can_discard and (horizon_passed if h.is_control else True)
            last = producers.get(h.producer_id) if h.producer_id >= 0 else None
            retain_empty = (last is not None and last.keeps(h)) or h.last_offset + 1 == upper_bound
            if discard_records and not retain_empty:
                result.batches_removed += 1
                continue
            j = data_pos.get(i)
            if j is None:  # a control batch, or a batch without records
                keep = np.full(h.records_count, not discard_records, np.bool_)
                has_tombstone = False
            else:
                lo = int(seg.record_start[j])
                keep = seg.keep[lo:lo + h.records_count] & (not discard_records)
                has_tombstone = bool((keep & tombstones[lo:lo + h.records_count]).any())
                result.tombstones_removed += int((~keep & tombstones[lo:lo + h.records_count]).sum())
            kept = int(keep.sum())
            if kept == 0:
                if retain_empty:
                    result.batches_emptied += 1
                    yield _empty(h)
                else:
                    result.batches_removed += 1
                continue
            result.records_kept += kept if not h.is_control else 0
            needs_horizon = (has_tombstone or (can_discard and h.is_control)) and not h.has_delete_horizon
            if kept == h.records_count and not needs_horizon:
                result.batches_copied += 1
                yield data[h.position:h.end_position]
                continue
            horizon = new_horizon if needs_horizon else (h.base_timestamp if h.has_delete_horizon else None)
            result.batches_reframed += 1
            yield _rebuild(data, h, keep, horizon)


def _prepare(inp: CompactionInput, settings: CompactionSettings, now_ms: int
             ) -> tuple[list[_Segment], CompactionResult, dict[int, ProducerLast], int]:
    """The loaded inputs it may compact, the result to fill, the producers' last state, and the
    round's upper bound (:attr:`CompactionInput.upper_bound`)."""
    segments = [_load(s) for s in inp.segments]
    for a, b in itertools.pairwise(segments):
        if a.headers and b.headers and b.headers[0].base_offset <= a.headers[-1].last_offset:
            raise InvalidCompactionInput(
                f"segment {b.base_offset} overlaps or precedes segment {a.base_offset}")
    producers = producers_from(inp.producers, (h for s in segments for h in s.headers))
    used = _cleanable(segments, settings, now_ms)
    left_out = segments[used] if used < len(segments) else None
    segments = segments[:used]
    end = max((s.headers[-1].last_offset + 1 for s in segments if s.headers), default=0)
    if left_out is not None:
        upper_bound = left_out.base_offset
    else:
        upper_bound = end if inp.upper_bound is None else inp.upper_bound
    result = CompactionResult(base_offset=segments[0].base_offset if segments else 0, end_offset=end,
                              segments_used=used)
    result.records_read = sum(s.n_records for s in segments)
    result.bytes_in = sum(h.size for s in segments for h in s.headers)
    return segments, result, producers, upper_bound


def compact_to_batches(inp: CompactionInput, settings: CompactionSettings | None = None, *,
                       now_ms: int | None = None) -> tuple[list[bytes], CompactionResult]:
    """The compacted batches in memory (tests, small ranges); see :func:`compact`."""
    settings = settings or CompactionSettings()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    t0 = time.perf_counter()
    segments, result, producers, upper_bound = _prepare(inp, settings, now_ms)
    result.reindexed = _walk_transactions(segments, _all_aborted(segments, inp.aborted))
    _passes(segments, inp, settings, now_ms, result, None)
    result.phase = "write"
    batches = list(_output(segments, producers, settings, now_ms, result, upper_bound))
    result.bytes_out = sum(len(b) for b in batches)
    result.seconds = time.perf_counter() - t0
    result.phase = "done"
    return batches, result


def compact(inp: CompactionInput, out_dir: str | Path, settings: CompactionSettings | None = None, *,
            now_ms: int | None = None, progress: Progress | None = None) -> CompactionResult:
    """Compact the cleanable prefix of ``inp.segments`` into one segment in ``out_dir``.

    The segment is named after the first input segment's base offset and covers offsets up to
    :attr:`CompactionResult.end_offset`; it replaces the first ``segments_used`` inputs. ``now_ms``
    is the cleaner's clock (delete horizons, ``min.compaction.lag.ms``). ``progress`` is called with
    the result as it fills (after each pass, before writing, when done) for status and metrics.
    """
    settings = settings or CompactionSettings()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    t0 = time.perf_counter()
    segments, result, producers, upper_bound = _prepare(inp, settings, now_ms)
    if not segments:
        result.seconds = time.perf_counter() - t0
        return result
    result.reindexed = _walk_transactions(segments, _all_aborted(segments, inp.aborted))
    _passes(segments, inp, settings, now_ms, result, progress)
    result.phase = "write"
    if progress is not None:
        progress(result)
    batches = _output(segments, producers, settings, now_ms, result, upper_bound)
    files = write_segment(out_dir, result.base_offset, batches, result.reindexed,
                          index_interval_bytes=settings.index_interval_bytes)
    result.files = files
    result.bytes_out = files.size
    result.seconds = time.perf_counter() - t0
    result.phase = "done"
    if progress is not None:
        progress(result)
    log.info("remote compaction", base_offset=result.base_offset, end_offset=result.end_offset,
             segments=result.segments_used, passes=result.passes, records_read=result.records_read,
             records_kept=result.records_kept, bytes_in=result.bytes_in, bytes_out=result.bytes_out)
    return result
