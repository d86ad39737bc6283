"""PartitionWriter output: Kafka's DumpLogSegments finds no problem, and every file agrees with
a scan of the batches (indexes, txn index, snapshots, epochs, LSO, lookups)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from rlm.errors import LogFileGoneError
from rlm.log.encode import encode_empty_batch
from rlm.log.lso import scan_aborted_transactions, stable_offsets
from rlm.log.partition import PartitionDir
from rlm.log.producer_snapshot import read_snapshot
from rlm.log.records import Compression, TimestampType, iter_batches
from rlm.log.writer import PartitionWriter, WriterConfig
from rlm.types import KafkaUuid
from tests.log_files import _checks as checks
from tests.log_files._data import INTERVAL, Clock, Expected, write_partition
from tests.services.kafka import dump_log_segments, dump_problems


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[PartitionDir, Expected]:
    d = tmp_path_factory.mktemp("w") / "orders-0"
    exp = write_partition(d)
    return PartitionDir(d), exp


def _kafka_files(p: PartitionDir) -> list[Path]:
    return sorted(f for f in p.path.iterdir() if f.suffix in (".log", ".index", ".timeindex", ".txnindex",
                                                              ".snapshot"))


def test_layout(written: tuple[PartitionDir, Expected]) -> None:
    p, exp = written
    assert len(p.segments) >= 4
    assert p.log_end_offset() == exp.log_end_offset
    bases = [s.base_offset for s in p.segments]
    assert p.snapshot_offsets == [*bases[1:], exp.log_end_offset]
    assert all(s.index_path.stat().st_size % 8 == 0 and s.time_index_path.stat().st_size % 12 == 0
               for s in p.segments)
    assert any(s.txn_index_path.exists() for s in p.segments)
    assert p.topic_id == PartitionDir(p.path).topic_id


def test_dump_log_segments_finds_no_problem(written: tuple[PartitionDir, Expected]) -> None:
    p, _ = written
    files = _kafka_files(p)
    sanity = dump_log_segments(*files, extra=("--deep-iteration", "--index-sanity-check"))
    assert dump_problems(sanity) == []
    assert sanity.stdout.count("passed sanity check") == 2 * len(p.segments)
    full = dump_log_segments(*files, extra=("--deep-iteration",))
    assert dump_problems(full) == []
    assert full.stdout.count("isvalid: true") == sum(len(list(iter_batches(s.log_path))) for s in p.segments)
    assert "producerId: 1000" in full.stdout and "lastStableOffset" in full.stdout


def test_files_agree_with_batches(written: tuple[PartitionDir, Expected]) -> None:
    p, exp = written
    s = checks.scan(p)
    assert [(r.offset, r.key, r.value) for _, r in s.records] == [(o, k, v) for o, k, v, *_ in exp.records]
    assert checks.check_indexes(p, s, INTERVAL) > 50
    derived = scan_aborted_transactions(p)
    assert checks.check_txn_indexes(p, derived) == len(derived) > 2
    assert any(a.last_stable_offset != a.last_offset + 1 for a in derived)  # interleaved transactions
    assert checks.check_snapshots(p) == len(p.snapshot_offsets)
    rnd = random.Random(3)
    checks.check_offset_lookups(p, s, rnd)
    maxes = [p.max_timestamp(seg).timestamp for seg in p.segments]
    assert any(later < earlier for i, earlier in enumerate(maxes) for later in maxes[i + 1:])
    checks.check_timestamp_lookups(p, s, rnd)


def test_leader_epochs(written: tuple[PartitionDir, Expected]) -> None:
    p, _ = written
    epochs = p.leader_epochs()
    assert [e.epoch for e in epochs] == [0, 3]
    for seg in p.segments:
        end = p.next_offset(seg)
        ranges = p.epochs_for_range(seg.base_offset, end)
        assert ranges[0][1] == seg.base_offset
        for h in iter_batches(seg.log_path):
            covering = [e for e, start in ranges if start <= h.base_offset][-1]
            assert covering == h.partition_leader_epoch


def test_lso_and_open_transaction(written: tuple[PartitionDir, Expected]) -> None:
    p, exp = written
    assert exp.open_txn_first_offset is not None
    st = stable_offsets(p, high_watermark=exp.log_end_offset)
    assert st.last_stable_offset == st.first_unstable_offset == exp.open_txn_first_offset
    assert st.open_transactions == {1000: exp.open_txn_first_offset}
    assert stable_offsets(p, high_watermark=exp.open_txn_first_offset - 5).last_stable_offset == \
        exp.open_txn_first_offset - 5
    assert stable_offsets(p, high_watermark=None).last_stable_offset == exp.open_txn_first_offset


def test_segment_model(written: tuple[PartitionDir, Expected], tmp_path: Path) -> None:
    src, _ = written
    d = tmp_path / "orders-0"
    shutil.copytree(src.path, d)
    first = src.segments[0]
    (d / first.log_path.name).rename(d / (first.log_path.name + ".deleted"))
    shutil.copy(d / src.segments[1].log_path.name, d / (src.segments[1].log_path.name + ".swap"))
    (d / "00000000000000099999.log.cleaned").write_bytes(b"x")
    p = PartitionDir(d)
    assert [s.base_offset for s in p.segments] == [s.base_offset for s in src.segments[1:]]
    for seg in p.inactive_segments():
        hs = list(iter_batches(seg.log_path))
        assert p.last_offset(seg) == hs[-1].last_offset
        assert p.next_offset(seg) == p.next_segment(seg).base_offset  # type: ignore[union-attr]
        mt = p.max_timestamp(seg)
        best = max(h.max_timestamp for h in hs)
        assert mt.timestamp == best
        assert mt.offset == next(h.last_offset for h in hs if h.max_timestamp == best)
        assert p.snapshot_for_segment(seg) == p.snapshot_path(p.next_offset(seg))
    gone = p.segments[0]
    for f in (gone.log_path, gone.index_path, gone.time_index_path):
        f.unlink()
    with pytest.raises(LogFileGoneError):
        p.last_offset(gone)
    with pytest.raises(LogFileGoneError):
        p.max_timestamp(gone)
    p.refresh()
    assert gone not in p.segments


def test_active_segment_with_preallocated_and_stale_index_tails(written: tuple[PartitionDir, Expected],
                                                                tmp_path: Path) -> None:
    """On a running broker the active segment's indexes are 10 MiB with a zero tail, and after a
    truncation stale entries may follow the valid ones; lookups must still be right."""
    src, _ = written
    d = tmp_path / "orders-0"
    shutil.copytree(src.path, d)
    p = PartitionDir(d)
    active = p.active_segment
    assert active is not None
    before = p.offset_index(active).entries(), p.time_index(active).entries()
    with open(active.index_path, "ab") as f:
        f.write(bytes(8 * 1000))
    with open(active.time_index_path, "ab") as f:
        f.write(bytes(12 * 1000))
    assert (p.offset_index(active).entries(), p.time_index(active).entries()) == before
    s = checks.scan(p)
    checks.check_offset_lookups(p, s, random.Random(5), samples=50)
    # a stale (larger, then smaller) entry in the slot after the valid ones
    raw = bytearray(active.index_path.read_bytes())
    n = len(before[0])
    raw[8 * n:8 * n + 8] = (10**6).to_bytes(4, "big") + (10**7).to_bytes(4, "big")
    active.index_path.write_bytes(bytes(raw))
    assert p.offset_index(active).entries()[:n] == before[0]
    checks.check_offset_lookups(p, s, random.Random(6), samples=50)


def test_log_append_time_and_time_roll(tmp_path: Path) -> None:
    exp = write_partition(tmp_path / "t-0", timestamp_type=TimestampType.LOG_APPEND_TIME, batches=80,
                          leave_open=False, epoch_change_at=None, segment_ms=100)
    p = PartitionDir(tmp_path / "t-0")
    assert len(p.segments) >= 3  # rolled by time (the clock advances 3 ms per call)
    s = checks.scan(p)
    assert all(r.timestamp == h.max_timestamp and h.timestamp_type == TimestampType.LOG_APPEND_TIME
               for h, r in s.records)
    checks.check_indexes(p, s, INTERVAL)
    checks.check_timestamp_lookups(p, s, random.Random(1))
    assert stable_offsets(p, high_watermark=None).last_stable_offset == exp.log_end_offset
    res = dump_log_segments(*_kafka_files(p), extra=("--deep-iteration",))
    assert dump_problems(res) == []


def test_compacted_empty_batch_and_codecs(tmp_path: Path) -> None:
    """An empty batch (all records removed by compaction) keeps the producer's state."""
    w = PartitionWriter(tmp_path / "c-0", topic_id=KafkaUuid.random(), clock=Clock(),
                        config=WriterConfig(index_interval_bytes=0))
    for c in Compression:
        w.append([(b"k", b"v" * 100)], compression=c)
    w.append([(b"k", b"v")], producer_id=5, producer_epoch=1)
    w.append_encoded(encode_empty_batch(base_offset=0, last_offset_delta=4, max_timestamp=Clock().now,
                                        producer_id=5, producer_epoch=1, base_sequence=1))
    w.roll()
    w.append([(b"k", b"v")])
    w.close()
    p = PartitionDir(tmp_path / "c-0")
    hs = list(iter_batches(p.segments[0].log_path))
    assert [h.compression for h in hs[:5]] == list(Compression)
    assert hs[-1].records_count == 0 and hs[-1].last_offset == 10
    checks.check_indexes(p, checks.scan(p), 0)
    snap = checks.check_snapshots(p)
    assert snap == 2
    entry = {e.producer_id: e for e in read_snapshot(p.snapshot_path(11))}[5]
    assert (entry.last_sequence, entry.last_offset, entry.offset_delta) == (5, 10, 4)
