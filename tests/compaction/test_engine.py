"""The engine's parts on files written here: the offset map's memory per key, several passes
equal one, min.compaction.lag.ms, newer keys, the producer's last batch, and bad input raising
typed errors instead of crashing."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rlm.compaction import (
    BYTES_PER_SLOT,
    CompactionInput,
    CompactionSettings,
    InvalidCompactionInput,
    NewerKeys,
    OffsetMap,
    OffsetMapTooSmall,
    compact,
    compact_to_batches,
    digest_keys,
    is_due,
)
from rlm.errors import LogFormatError
from rlm.log import Compression, ControlRecordType, iter_batches, read_arrow
from rlm.log.encode import encode_batch, encode_control_batch, encode_legacy_message_set

KAFKA_BYTES_PER_KEY = 24 / 0.9  # SkimpyOffsetMap: 16-byte MD5 + 8-byte offset per slot, load factor 0.9
NOW = 1_800_000_000_000


def segment(base: int, items: list[tuple[bytes | None, bytes | None]], *, ts: int = NOW - 10_000,
            per_batch: int = 3, pid: int = -1) -> bytes:
    out, offset = [], base
    for i in range(0, len(items), per_batch):
        chunk = items[i:i + per_batch]
        out.append(encode_batch([(k, v, None, ts) for k, v in chunk], base_offset=offset,
                                compression=Compression.ZSTD if i % 2 else Compression.NONE,
                                producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                base_sequence=offset if pid >= 0 else -1))
        offset += len(chunk)
    return b"".join(out)


def survivors(batches: list[bytes]) -> list[tuple[int, bytes | None, bytes | None]]:
    t = read_arrow(b"".join(batches), topic="t", partition=0)
    cols = (t.column(c).to_pylist() for c in ("offset", "key", "value"))
    return list(zip(*cols, strict=True))


def test_offset_map_memory_per_key_is_below_kafkas() -> None:
    """Measured, not computed: the bytes the map allocates, divided by the keys it holds when full."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        omap = OffsetMap(8 * 1024 * 1024)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    keys = pa.array([b"key-%09d" % i for i in range(omap.max_keys + 1000)])
    digests = digest_keys(keys)
    consumed = omap.put_all(digests, np.arange(len(keys), dtype=np.int64), np.ones(len(keys), np.bool_))
    assert consumed == omap.max_keys == omap.size  # full: the next new key ends the pass
    per_key = allocated / omap.size
    assert omap.memory_bytes <= 8 * 1024 * 1024
    assert allocated <= 8 * 1024 * 1024 + 4096  # the table plus three array objects' headers
    assert per_key <= KAFKA_BYTES_PER_KEY * 0.85, f"{per_key:.1f} bytes per key"
    assert per_key == pytest.approx(BYTES_PER_SLOT / 0.9, rel=0.01)
    found = omap.get_all(digests)
    assert (found[:consumed] == np.arange(consumed)).all() and (found[consumed:] == -1).all()


def test_digests_of_distinct_keys_differ_and_null_keys_have_none() -> None:
    keys = pa.array([b"", b"a", b"b", None, b"a" * 7, b"a" * 8, b"a" * 9, b"x" * 1000] +
                    [b"%d" % i for i in range(200_000)])
    d = digest_keys(keys)
    pairs = set(zip(d.hi[d.has_key].tolist(), d.lo[d.has_key].tolist(), strict=True))
    assert len(pairs) == len(keys) - 1 and not d.has_key[3]
    again = digest_keys(keys.slice(1, 3))  # a slice digests as the whole column does
    assert (again.hi[:2] == d.hi[1:3]).all()


def test_several_passes_keep_what_one_pass_keeps() -> None:
    items = [(b"k%d" % (i % 50), b"v%d" % i) for i in range(600)] + [(b"k7", None), (b"k8", None)]
    segs = [segment(0, items[:300]), segment(300, items[300:])]
    one, r1 = compact_to_batches(CompactionInput(segs), now_ms=NOW)
    tiny = CompactionSettings(offset_map_memory_bytes=200)  # 9 keys per pass
    many, rn = compact_to_batches(CompactionInput(segs), tiny, now_ms=NOW)
    assert r1.passes == 1 and rn.passes > 5
    assert survivors(one) == survivors(many)
    assert sorted(k for _, k, _ in survivors(one)) == sorted(b"k%d" % i for i in range(50))


def test_segments_younger_than_min_compaction_lag_are_left_alone(tmp_path: Path) -> None:
    old = segment(0, [(b"a", b"1"), (b"a", b"2")], ts=NOW - 60_000)
    young = segment(2, [(b"a", b"3")], ts=NOW - 1_000)
    for name, data in (("00000000000000000000.log", old), ("00000000000000000002.log", young)):
        (tmp_path / name).write_bytes(data)
    inp = CompactionInput([tmp_path / "00000000000000000000.log", tmp_path / "00000000000000000002.log"])
    result = compact(inp, tmp_path / "out", CompactionSettings(min_compaction_lag_ms=10_000), now_ms=NOW)
    assert result.segments_used == 1 and result.end_offset == 2
    assert result.files is not None
    assert [(o, v) for o, _, v in survivors([result.files.log.read_bytes()])] == [(1, b"2")]


def test_newer_keys_supersede_every_remote_record_of_their_key() -> None:
    seg = segment(0, [(b"a", b"1"), (b"b", b"1"), (b"c", None), (b"a", b"2")])
    batches, _ = compact_to_batches(CompactionInput([seg], newer_keys=NewerKeys.from_keys([b"a", b"c"])),
                                    now_ms=NOW)
    assert survivors(batches) == [(1, b"b", b"1")]


def test_full_newer_key_set_only_compacts_less() -> None:
    newer = NewerKeys.from_keys([b"k%d" % i for i in range(10)], memory_bytes=100)
    assert not newer.complete and 0 < len(newer) < 10


def test_producers_last_batch_stays_as_an_empty_header() -> None:
    seg = segment(0, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"a", b"3")], per_batch=2, pid=4)
    batches, result = compact_to_batches(CompactionInput([seg]), now_ms=NOW)
    headers = [next(iter_batches(b)) for b in batches]
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [(2, 3, 2)]
    # every record superseded by newer keys: the producer's last batch stays as a 61-byte header
    # with its offsets and sequence (DefaultRecordBatch.writeEmptyHeader), the other goes
    seg2 = segment(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2")], per_batch=2, pid=4)
    newer = NewerKeys.from_keys([b"a", b"b"])
    batches, result = compact_to_batches(CompactionInput([seg2], newer_keys=newer), now_ms=NOW)
    headers = [next(iter_batches(b)) for b in batches]
    got = [(h.base_offset, h.last_offset, h.records_count, h.base_sequence, h.producer_id) for h in headers]
    assert got == [(2, 3, 0, 2, 4)] and len(batches[0]) == 61
    assert result.batches_removed == 1 and result.batches_emptied == 1


def test_the_last_batch_of_the_round_stays_as_an_empty_header(tmp_path: Path) -> None:
    """Kafka's cleaner keeps the batch whose next offset is the round's upper bound (the first
    uncleanable offset), empty if need be, "so that last offset information is not lost"
    (``Cleaner.cleanInto``): found when a real broker kept the emptied last batch of an
    aborted transaction and the engine did not (tests/compaction/test_broker_cleaner.py)."""
    seg = segment(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2")], per_batch=2)
    newer = NewerKeys.from_keys([b"a", b"b"])
    batches, result = compact_to_batches(CompactionInput([seg], newer_keys=newer), now_ms=NOW)
    headers = [next(iter_batches(b)) for b in batches]
    got = [(h.base_offset, h.last_offset, h.records_count, h.producer_id) for h in headers]
    assert got == [(2, 3, 0, -1)]
    assert result.end_offset == 4 and result.batches_emptied == 1 and result.batches_removed == 1
    # the range ends past its last batch (the cleaner removed its tail before): nothing to keep
    batches, _ = compact_to_batches(CompactionInput([seg], newer_keys=newer, upper_bound=10), now_ms=NOW)
    assert batches == []
    # min.compaction.lag.ms leaves the second segment out: the bound is its base offset
    first = segment(0, [(b"a", b"1"), (b"a", b"2")], ts=NOW - 60_000, per_batch=1)
    young = segment(2, [(b"a", b"3")], ts=NOW - 1_000)
    for name, data in (("00000000000000000000.log", first), ("00000000000000000002.log", young)):
        (tmp_path / name).write_bytes(data)
    inp = CompactionInput([tmp_path / "00000000000000000000.log", tmp_path / "00000000000000000002.log"],
                          newer_keys=NewerKeys.from_keys([b"a"]))
    result = compact(inp, tmp_path / "out", CompactionSettings(min_compaction_lag_ms=10_000), now_ms=NOW)
    assert result.segments_used == 1 and result.files is not None
    kept = [(h.base_offset, h.records_count) for h in iter_batches(result.files.log.read_bytes())]
    assert kept == [(1, 0)]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (encode_legacy_message_set([(b"k", b"v", 0)], base_offset=0, magic=1), InvalidCompactionInput),
        (segment(0, [(b"k", b"v")])[:-3], None),  # a cut last batch: the walk stops before it
        (b"\x00" * 12 + b"\xff" * 60, LogFormatError),
    ],
)
def test_bad_input_raises_a_typed_error(data: bytes, error: type[Exception] | None) -> None:
    if error is None:
        batches, result = compact_to_batches(CompactionInput([data]), now_ms=NOW)
        assert result.records_read == 0 and batches == []
        return
    with pytest.raises(error):
        compact_to_batches(CompactionInput([data]), now_ms=NOW)


def test_overlapping_segments_and_tiny_maps_are_refused() -> None:
    seg = segment(0, [(b"k", b"v")] * 3)
    with pytest.raises(InvalidCompactionInput, match="overlaps"):
        compact_to_batches(CompactionInput([seg, seg]), now_ms=NOW)
    with pytest.raises(OffsetMapTooSmall):
        OffsetMap(BYTES_PER_SLOT)
    with pytest.raises(InvalidCompactionInput, match="binary"):
        digest_keys(pa.array([1, 2, 3]))


def test_records_below_the_dirty_offset_are_not_in_the_map() -> None:
    """Like the cleaner checkpoint: the clean part is not indexed, so only keys the dirty part
    writes again are superseded there."""
    seg = segment(0, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"b", b"2"), (b"a", b"3")], per_batch=1)
    batches, _ = compact_to_batches(CompactionInput([seg], dirty_offset=3), now_ms=NOW)
    got = [(o, k) for o, k, _ in survivors(batches)]
    # a@0 and a@1 are superseded by a@4 (in the dirty part); b@2 by b@3; nothing else goes
    assert got == [(3, b"b"), (4, b"a")]
    batches, _ = compact_to_batches(CompactionInput([seg], dirty_offset=4), now_ms=NOW)
    assert [(o, k) for o, k, _ in survivors(batches)] == [(2, b"b"), (3, b"b"), (4, b"a")]


def test_is_due_follows_the_dirty_ratio_and_the_maximum_lag() -> None:
    cfg = CompactionSettings.from_kafka({"min.cleanable.dirty.ratio": "0.5", "max.compaction.lag.ms": "1000",
                                         "segment.bytes": "1048576"})
    assert cfg.min_cleanable_dirty_ratio == 0.5 and cfg.max_compaction_lag_ms == 1000
    assert is_due(cfg, dirty_bytes=60, total_bytes=100, oldest_dirty_timestamp=None, now_ms=NOW)
    assert not is_due(cfg, dirty_bytes=40, total_bytes=100, oldest_dirty_timestamp=NOW - 500, now_ms=NOW)
    assert is_due(cfg, dirty_bytes=40, total_bytes=100, oldest_dirty_timestamp=NOW - 5000, now_ms=NOW)
    assert not is_due(cfg, dirty_bytes=0, total_bytes=100, oldest_dirty_timestamp=NOW - 5000, now_ms=NOW)
    with pytest.raises(ValueError, match="min_cleanable_dirty_ratio"):
        CompactionSettings.from_kafka({"min.cleanable.dirty.ratio": "2"})


def test_aborted_data_goes_when_its_marker_is_in_the_input_without_a_txnindex() -> None:
    data = encode_batch([(b"a", b"kept", None, NOW - 10)], base_offset=0)
    aborted = encode_batch([(b"a", b"aborted", None, NOW - 9)], base_offset=1, producer_id=7,
                           producer_epoch=0, base_sequence=0, is_transactional=True)
    marker = encode_control_batch(offset=2, producer_id=7, producer_epoch=0,
                                  control_type=ControlRecordType.ABORT, coordinator_epoch=0,
                                  timestamp=NOW - 8)
    batches, result = compact_to_batches(CompactionInput([data + aborted + marker]), now_ms=NOW)
    assert [(o, v) for o, _, v in survivors(batches)] == [(0, b"kept")]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in result.reindexed] == [(7, 1, 2)]


def test_progress_reports_each_pass_then_the_write(tmp_path: Path) -> None:
    items = [(b"k%d" % (i % 40), b"v%d" % i) for i in range(400)]
    seen: list[tuple[str, int, int]] = []
    small = CompactionSettings(offset_map_memory_bytes=400)
    result = compact(CompactionInput([segment(0, items)]), tmp_path, small, now_ms=NOW,
                     progress=lambda r: seen.append((r.phase, r.passes, r.records_mapped)))
    assert result.passes > 1 and seen[-1] == ("done", result.passes, 400)
    maps = [s for s in seen if s[0] == "map"]
    assert [p for _, p, _ in maps] == list(range(1, result.passes + 1))
    assert [m for _, _, m in maps] == sorted(m for _, _, m in maps) and maps[-1][2] == 400
    assert [s[0] for s in seen[-2:]] == ["write", "done"]


def test_warm_up_runs_a_compaction() -> None:
    from rlm.compaction import warm_kernels

    assert warm_kernels() == 6  # latest k0, k1 (a tombstone, kept) and k2 in each of two compactions
