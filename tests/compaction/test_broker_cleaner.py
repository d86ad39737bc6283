"""Remote compaction against the real broker's log cleaner on the same segments.

A compacted topic is fed a keyed workload (updates, tombstones, deleted-then-rewritten keys, an
idempotent lz4 producer, a plain zstd producer, committed and aborted transactions) while the
cleaner is held back (``tests/compaction/workload.py``); the rolled segments are copied aside;
then the ratio is lowered and the broker's cleaner cleans them. The engine compacts the copies,
and the surviving (offset, key, value) of the cleaned range must be the broker's exactly; the
output must pass Kafka's DumpLogSegments; a read_committed consumer of the broker and the engine's
output followed by the broker's uncleaned tail both give the workload's final value per key.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.compaction import CompactionInput, CompactionSettings, compact, last_batches_of_producers
from rlm.log import Compression, decode_records, iter_batches, read_arrow, read_time_index
from tests.compaction import workload as wl
from tests.daemon.helpers import consume_partition
from tests.services.kafka import KafkaCluster, dump_log_segments, dump_problems
from tests.services.proc import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

Row = tuple[int, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def cleaner_broker() -> Iterator[KafkaCluster]:
    """A broker of its own whose cleaner looks for work every 200 ms (Kafka's default is 15 s)."""
    cluster = KafkaCluster(nodes=1, name="cleaner", extra={"log.cleaner.backoff.ms": "200"}).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def rows(path: Path, below: int | None = None) -> set[Row]:
    t = read_arrow(path, topic="t", partition=0, end_offset=below)
    return set(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(), t.column("value").to_pylist(),
                   strict=True))


def broker_rows(pdir: Path, below: int) -> set[Row]:
    out: set[Row] = set()
    for log in wl.segment_files(pdir):
        if int(log.name.removesuffix(".log")) < below:
            out |= rows(log, below)
    return out


def final_values(items: set[Row] | list[Row]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, key, value in sorted(items, key=lambda r: r[0]):
        assert key is not None
        out[key] = value
    return out


def committed_from(cluster: KafkaCluster, topic: str, start: int) -> list[Row]:
    """What a read_committed consumer reads from ``start`` to the end (the broker's view)."""
    return consume_partition(cluster.bootstrap, topic, start, "read_committed")


def model_view(model: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    return {k: v for k, v in model.items() if v is not None}


def live(values: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    return {k: v for k, v in values.items() if v is not None}


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_engine_keeps_what_the_broker_cleaner_keeps(cleaner_broker: KafkaCluster, tmp_path: Path,
                                                    timestamps: str) -> None:
    topic = f"compaction-reference-{timestamps}"
    wl.create_topic(cleaner_broker, topic, **{"message.timestamp.type": timestamps})
    written = wl.write(cleaner_broker, topic)
    pdir = wl.partition_dir(cleaner_broker, topic)
    copies, aborted, active = wl.copy_rolled(pdir, tmp_path / "input")
    assert len(copies) >= 3, "the workload must roll several segments"
    assert aborted, "the workload must leave aborted transactions in the .txnindex files"
    assert wl.cleaner_checkpoint(cleaner_broker, topic) < 0, "the cleaner ran before the copy"

    wl.release_cleaner(cleaner_broker, topic)
    wl.wait_cleaned(cleaner_broker, topic, active)

    # the broker's producer state when it cleans covers its active segment too
    producers = last_batches_of_producers(
        h for log in wl.segment_files(pdir) for h in iter_batches(log.read_bytes()))
    result = compact(CompactionInput(copies, aborted=aborted, producers=producers), tmp_path / "out",
                     CompactionSettings())
    assert result.segments_used == len(copies) and result.end_offset == active
    assert result.files is not None
    ours = rows(result.files.log)
    theirs = broker_rows(pdir, active)
    assert ours == theirs, (f"{len(ours - theirs)} records only in ours (e.g. {sorted(ours - theirs)[:3]}), "
                            f"{len(theirs - ours)} only in the broker's (e.g. {sorted(theirs - ours)[:3]})")
    assert result.records_kept == len(ours) < result.records_read
    assert_same_batches(result.files.log, pdir, active)

    values = {v for _, _, v in ours}
    assert not values & written.aborted_values, "aborted data survived"
    # read_committed through the broker, and the engine's output + the broker's tail, both give the model
    tail = committed_from(cleaner_broker, topic, active)
    assert live(final_values(committed_from(cleaner_broker, topic, 0))) == model_view(written.model)
    ours_then_tail = final_values(sorted(ours) + tail)
    assert live(ours_then_tail) == model_view(written.model)
    rewritten = [k for k in written.deleted_then_rewritten if written.model[k] is not None]
    assert rewritten, "the workload must delete keys and write them again"
    assert all(ours_then_tail[k] == written.model[k] for k in rewritten)

    assert_kafka_reads(result.files.log, result.files.offset_index, result.files.time_index)
    # the broker's last cleaned segment ends its time index where ours does (FilterResult's max
    # timestamp counts empty headers, as here); its other entries follow its read-buffer chunks
    last_index = max(p for p in pdir.glob("*.timeindex") if int(p.name.split(".")[0]) < active)
    assert read_time_index(result.files.time_index).last_entry == read_time_index(last_index).last_entry


def assert_same_batches(ours: Path, pdir: Path, below: int) -> None:
    """Batch for batch, our output is the broker's cleaned log: same offsets, producer fields,
    attributes (delete-horizon bit included), record counts and records (offset, timestamp, key,
    value, headers); an uncompressed batch without a delete horizon is byte for byte the broker's
    (a horizon is the cleaner's clock; compressed batches are re-compressed by another library)."""
    mine = {h.base_offset: (h, ours.read_bytes()[h.position:h.end_position])
            for h in iter_batches(ours.read_bytes())}
    theirs = {}
    for log in wl.segment_files(pdir):
        data = log.read_bytes()
        for h in iter_batches(data):
            if h.base_offset < below:
                theirs[h.base_offset] = (h, data[h.position:h.end_position])
    assert sorted(mine) == sorted(theirs), (
        f"only ours: {[mine[o][0] for o in sorted(set(mine) - set(theirs))][:3]}, "
        f"only the broker's: {[theirs[o][0] for o in sorted(set(theirs) - set(mine))][:3]}")
    fields = ("last_offset_delta", "attributes", "producer_id", "producer_epoch", "base_sequence",
              "records_count", "partition_leader_epoch")
    same_bytes = 0
    for base, (h, raw) in mine.items():
        b, braw = theirs[base]
        assert [getattr(h, f) for f in fields] == [getattr(b, f) for f in fields], (h, b)
        assert decode_records(raw) == decode_records(braw), f"batch {base}: records differ"
        if h.compression == Compression.NONE and not h.has_delete_horizon:
            assert raw == braw, f"batch {base} differs from the broker's"
            same_bytes += 1
    assert same_bytes


def assert_kafka_reads(log: Path, *indexes: Path) -> None:
    """Kafka's DumpLogSegments parses the segment, every CRC is valid and it finds no problem but
    two that any cleaned segment shows: offset gaps, and a time-index entry on a producer's empty
    batch (``FilterResult`` counts an empty batch's max timestamp, as here; the tool then finds no
    record and reports log timestamp -1)."""
    res = dump_log_segments(log, *indexes)
    empty_stamps = {h.max_timestamp for h in iter_batches(log.read_bytes()) if h.records_count == 0}
    problems = []
    for line in dump_problems(res):
        if "Non-consecutive offsets" in line or "Found timestamp mismatch" in line:
            continue
        problems.append(line)
    for index_ts, log_ts in re.findall(r"Index timestamp: (-?\d+), log timestamp: (-?\d+)", res.stdout):
        if not (log_ts == "-1" and int(index_ts) in empty_stamps):
            problems.append(f"time index entry {index_ts} does not match the log ({log_ts})")
    assert not problems, "\n".join(problems)
    assert "isvalid: true" in res.stdout.lower()


def test_tombstones_go_after_delete_retention_like_the_broker(cleaner_broker: KafkaCluster,
                                                              tmp_path: Path) -> None:
    """delete.retention.ms=1000: the first clean keeps tombstones and stamps their batches' delete
    horizon; a clean after the horizon removes them, in the broker's log and in the engine's output
    compacted again."""
    topic = "compaction-tombstones"
    wl.create_topic(cleaner_broker, topic, **{"delete.retention.ms": "1000"})
    written = wl.write(cleaner_broker, topic, keys=1500, rounds=10, seed=11)
    pdir = wl.partition_dir(cleaner_broker, topic)
    copies, aborted, active = wl.copy_rolled(pdir, tmp_path / "input")
    assert wl.cleaner_checkpoint(cleaner_broker, topic) < 0, "the cleaner ran before the copy"

    wl.release_cleaner(cleaner_broker, topic)
    wl.wait_cleaned(cleaner_broker, topic, active)
    cleaned_at = int(time.time() * 1000)  # the broker's horizons are at most this + 1000
    settings = CompactionSettings(delete_retention_ms=1000)
    first_now = int(time.time() * 1000)
    first = compact(CompactionInput(copies, aborted=aborted), tmp_path / "first", settings, now_ms=first_now)
    assert first.files is not None
    tombstones = {(o, k) for o, k, v in rows(first.files.log) if v is None}
    assert tombstones, "the first compaction keeps the tombstones (their horizon has just been set)"
    assert tombstones == {(o, k) for o, k, v in broker_rows(pdir, active) if v is None}

    # a second broker clean after the horizon: more data rolls a new segment and makes the log dirty
    wait_until("the broker's delete horizons to pass", lambda: time.time() * 1000 > cleaned_at + 1000,
               timeout=10)
    more = wl.write(cleaner_broker, topic, keys=1500, rounds=10, seed=12)
    assert more.records
    second_active = int(wl.segment_files(pdir)[-1].name.removesuffix(".log"))
    wl.wait_cleaned(cleaner_broker, topic, second_active)
    second = compact(CompactionInput([first.files.log], aborted=first.reindexed), tmp_path / "second",
                     settings, now_ms=first_now + 1000)  # exactly at the horizon the first run set
    assert second.files is not None
    assert_kafka_reads(second.files.log, second.files.offset_index, second.files.time_index)
    survivors = rows(second.files.log)
    assert not any(v is None for _, _, v in survivors), "a tombstone outlived delete.retention.ms"
    broker_old = broker_rows(pdir, active)
    assert not any(v is None for _, _, v in broker_old), "the broker kept a tombstone past its horizon"
    # the keys the second workload wrote supersede old values in the broker's log; the rest must agree
    newer = set(more.model)
    assert {r for r in survivors if r[1] not in newer} == {r for r in broker_old if r[1] not in newer}
    assert written.records
