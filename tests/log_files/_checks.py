"""Cross-checks of a partition directory: every index entry, the time index, the txn index,
producer snapshots and lookups against a plain scan of the batches and records."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rlm.log import iter_batches
from rlm.log.lookup import find_offset, find_offset_for_timestamp
from rlm.log.partition import PartitionDir, Segment
from rlm.log.producer_snapshot import read_snapshot
from rlm.log.producer_state import rebuild_producer_state
from rlm.log.records import BatchHeader, ControlRecord, Record, iter_records
from rlm.log.txn_index import AbortedTxn


@dataclass
class Scan:
    headers: dict[int, list[BatchHeader]]  # segment base -> batches
    records: list[tuple[BatchHeader, Record]]
    controls: list[tuple[BatchHeader, ControlRecord]]


def scan(p: PartitionDir) -> Scan:
    headers: dict[int, list[BatchHeader]] = {}
    records: list[tuple[BatchHeader, Record]] = []
    controls: list[tuple[BatchHeader, ControlRecord]] = []
    for seg in p.segments:
        headers[seg.base_offset] = list(iter_batches(seg.log_path))
        for h, r in iter_records(seg.log_path):
            if isinstance(r, ControlRecord):
                controls.append((h, r))
            else:
                records.append((h, r))
    return Scan(headers, records, controls)


def expected_indexes(batches: list[BatchHeader], base: int, interval: int,
                     closed: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """What ``LogSegment.recover`` (one batch per append) writes, plus the roll entry if closed."""
    index: list[tuple[int, int]] = []
    tindex: list[tuple[int, int]] = []
    since, max_ts, max_off = 0, -1, base
    for h in batches:
        if h.max_timestamp > max_ts:
            max_ts, max_off = h.max_timestamp, h.last_offset
        if since > interval:
            index.append((h.last_offset, h.position))
            if max_ts > (tindex[-1][0] if tindex else -1):
                tindex.append((max_ts, max_off))
            since = 0
        since += h.size
    if closed and max_ts > (tindex[-1][0] if tindex else -1):
        tindex.append((max_ts, max_off))
    return index, tindex


def check_indexes(p: PartitionDir, s: Scan, interval: int) -> int:
    """Every .index/.timeindex entry equals the recomputed one and points at a real batch."""
    checked = 0
    for seg in p.segments:
        batches = s.headers[seg.base_offset]
        by_pos = {h.position: h for h in batches}
        oi, ti = p.offset_index(seg), p.time_index(seg)
        for e in oi.entries():
            assert by_pos[e.position].last_offset == e.offset, (seg, e)
        for t in ti.entries():
            b = next(h for h in batches if h.last_offset >= t.offset)
            assert b.last_offset == t.offset and b.max_timestamp == t.timestamp, (seg, t)
        exp_i, exp_t = expected_indexes(batches, seg.base_offset, interval, closed=True)
        assert [(e.offset, e.position) for e in oi.entries()] == exp_i, seg
        got_t = [(t.timestamp, t.offset) for t in ti.entries()]
        if p.is_active(seg):  # a live broker has not written the close entry yet; a stopped one has
            open_t = expected_indexes(batches, seg.base_offset, interval, closed=False)[1]
            assert got_t in (exp_t, open_t), seg
        else:
            assert got_t == exp_t, seg
        checked += len(oi) + len(ti)
    return checked


def check_txn_indexes(p: PartitionDir, derived: list[AbortedTxn]) -> int:
    """Each segment's .txnindex equals the aborts derived from the log whose marker it holds."""
    total = 0
    for seg in p.segments:
        nxt = p.next_segment(seg)
        end = nxt.base_offset if nxt else 2**63 - 1
        want = [a for a in derived if seg.base_offset <= a.last_offset < end]
        assert p.aborted_transactions(seg) == want, seg
        total += len(want)
    return total


def check_snapshots(p: PartitionDir, *, exact_bytes: bool = True) -> int:
    """Every snapshot the directory holds equals the state rebuilt from the log alone."""
    n = 0
    for off in p.snapshot_offsets:
        path = p.snapshot_path(off)
        rebuilt = rebuild_producer_state(p, off, use_snapshots=False)
        assert sorted(read_snapshot(path)) == sorted(rebuilt.snapshot_entries()), off
        if exact_bytes:
            assert path.read_bytes() == rebuilt.snapshot_bytes(), off
        n += 1
    return n


def check_offset_lookups(p: PartitionDir, s: Scan, rnd: random.Random, samples: int = 200) -> None:
    batches = [h for seg in p.segments for h in s.headers[seg.base_offset]]
    seg_of = {h.base_offset: seg for seg in p.segments for h in s.headers[seg.base_offset]}
    for h in rnd.sample(batches, min(samples, len(batches))):
        target = rnd.randint(h.base_offset, h.last_offset)
        loc = find_offset(p, target)
        assert loc is not None and loc.batch.base_offset == h.base_offset, (target, loc)
        assert loc.segment == seg_of[h.base_offset] and loc.position == h.position
    assert find_offset(p, p.log_end_offset()) is None


def check_timestamp_lookups(p: PartitionDir, s: Scan, rnd: random.Random, samples: int = 60) -> None:
    """KIP-33: the answer is the first record (in offset order) with timestamp >= T."""
    recs = sorted([(r.offset, r.timestamp) for _, r in s.records]
                  + [(c.offset, c.timestamp) for _, c in s.controls])
    stamps = sorted({ts for _, ts in recs})
    targets = [*rnd.sample(stamps, min(samples, len(stamps))), stamps[0] - 1, stamps[-1], stamps[-1] + 1]
    for t in targets:
        want = next(((ts, off) for off, ts in recs if ts >= t), None)
        got = find_offset_for_timestamp(p, t)
        assert (None if got is None else (got.timestamp, got.offset)) == want, t


def segment_of(p: PartitionDir, offset: int) -> Segment:
    seg = p.segment_for(offset)
    assert seg is not None
    return seg
