"""rlm.log against the real broker's own partition directories.

confluent-kafka producers write every codec, headers, null keys and values, records with old
timestamps, an idempotent producer, committed and aborted transactions and one transaction
left open; topics use 1 MiB segments and a 1 KiB index interval so several segments roll.
Then every index entry, the time-index lookup, the .txnindex, the producer snapshots and the
LSO computed from the files are compared with a scan of the batches and with the broker's
own answers (ListOffsets by timestamp and with read_committed).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from rlm.log.lookup import find_offset_for_timestamp
from rlm.log.lso import aborted_transactions, scan_aborted_transactions, stable_offsets
from rlm.log.partition import LogDir, PartitionDir
from rlm.log.producer_state import rebuild_producer_state, snapshot_bytes_at
from rlm.log.records import TimestampType, iter_batches
from rlm.types import TopicPartition
from tests.log_files import _checks as checks
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

INTERVAL = 1024
TOPIC_CONFIG = {"segment.bytes": "1048576", "index.interval.bytes": str(INTERVAL)}


@dataclass
class Produced:
    topic: str
    lat_topic: str
    dir: Path
    lat_dir: Path
    open_txn_first_offset: int
    aborted: int
    records: int
    admin: AdminClient
    producers: list[Producer] = field(default_factory=list)


def _wait(what: str, cond: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _produce(p: Producer, topic: str, n: int, rnd: random.Random, *, old: bool = False) -> list[int]:
    offsets: list[int] = []

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        offsets.append(msg.offset())  # type: ignore[attr-defined]

    for i in range(n):
        key = None if i % 11 == 0 else f"k{rnd.randrange(10_000)}".encode()
        value = None if i % 17 == 0 else rnd.randbytes(rnd.randint(200, 500))
        headers = [("h", rnd.randbytes(3)), ("n", None)] if i % 3 == 0 else None
        ts = int(time.time() * 1000) - (3_600_000 if old else 0)
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0
    return offsets


@pytest.fixture(scope="module")
def produced(kafka: KafkaCluster) -> Iterator[Produced]:
    topic, lat_topic = f"logfiles-{uuid.uuid4().hex[:8]}", f"logfiles-lat-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    lat_config = {**TOPIC_CONFIG, "message.timestamp.type": "LogAppendTime"}
    futs = admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG),
                                NewTopic(lat_topic, 1, 1, config=lat_config)])
    for f in futs.values():
        f.result(30)
    rnd = random.Random(11)
    base = {"bootstrap.servers": kafka.bootstrap, "linger.ms": 2, "batch.size": 16384}
    total = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({**base, "compression.type": codec, "enable.idempotence": False, "acks": "all"})
        old = codec == "snappy"  # > 2 segments' worth of hour-old records: time goes back between segments
        total += len(_produce(p, topic, 6000 if old else 700, rnd, old=old))
    idem = Producer({**base, "enable.idempotence": True, "compression.type": "lz4"})
    total += len(_produce(idem, topic, 600, rnd))
    txn = Producer({**base, "transactional.id": f"tx-{topic}", "compression.type": "zstd"})
    txn.init_transactions(30)
    aborted = 0
    for i in range(6):
        txn.begin_transaction()
        total += len(_produce(txn, topic, 60, rnd))
        if i % 2:
            txn.abort_transaction(30)
            aborted += 1
        else:
            txn.commit_transaction(30)
    plain = Producer({**base, "compression.type": "gzip", "acks": "all"})
    total += len(_produce(plain, topic, 300, rnd))
    lat = Producer({**base, "compression.type": "snappy", "acks": "all"})
    _produce(lat, lat_topic, 4000, rnd)
    hanging = Producer({**base, "transactional.id": f"tx-open-{topic}", "transaction.timeout.ms": 600_000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    first_open = min(_produce(hanging, topic, 20, rnd))
    total += 20
    pdir, lat_dir = kafka.log_dir / f"{topic}-0", kafka.log_dir / f"{lat_topic}-0"
    _wait("rolled segments",
          lambda: len(PartitionDir(pdir).segments) >= 4 and len(PartitionDir(lat_dir).segments) >= 2)
    leo = PartitionDir(pdir).log_end_offset()
    log_dir = LogDir(kafka.log_dir)
    _wait("HW checkpoint", lambda: (log_dir.high_watermark(TopicPartition(topic, 0)) or 0) >= leo, timeout=30)
    res = Produced(topic, lat_topic, pdir, lat_dir, first_open, aborted, total, admin, [hanging])
    try:
        yield res
    finally:
        hanging.abort_transaction(30)


def test_every_index_entry_matches_the_batches(produced: Produced) -> None:
    for d in (produced.dir, produced.lat_dir):
        p = PartitionDir(d)
        s = checks.scan(p)
        # Not vacuous: the count follows the producer's batching (one entry per batch over the
        # 1 KiB interval, ~16 KiB batches), so it is bounded by the batches, not a fixed number.
        batches = sum(len(s.headers[seg.base_offset]) for seg in p.segments)
        assert checks.check_indexes(p, s, INTERVAL) >= batches // 2 > 20
        checks.check_offset_lookups(p, s, random.Random(1))
    p = PartitionDir(produced.dir)
    s = checks.scan(p)
    assert len(s.records) == produced.records
    lat = checks.scan(PartitionDir(produced.lat_dir))
    assert all(h.timestamp_type == TimestampType.LOG_APPEND_TIME and r.timestamp == h.max_timestamp
               for h, r in lat.records)


def test_segment_model(produced: Produced) -> None:
    p = PartitionDir(produced.dir)
    for seg in p.inactive_segments():
        hs = list(iter_batches(seg.log_path))
        assert p.last_offset(seg) == hs[-1].last_offset
        assert p.next_offset(seg) == hs[-1].next_offset
        best = max(h.max_timestamp for h in hs)
        assert p.max_timestamp(seg).timestamp == best
        assert p.snapshot_for_segment(seg) == p.snapshot_path(p.next_offset(seg))
    names = {q.topic_partition.topic for q in LogDir(p.path.parent).partitions()}
    assert {produced.topic, produced.lat_topic} <= names
    assert LogDir(p.path.parent).meta_properties.node_id == 1
    assert p.leader_epochs()[0].start_offset == 0
    assert p.epochs_for_range(0, p.log_end_offset())[0] == (p.leader_epochs()[0].epoch, 0)


def _broker_offset_for(produced: Produced, topic: str, ts: int, level: IsolationLevel) -> int:
    tp = CkTopicPartition(topic, 0)
    res = produced.admin.list_offsets({tp: OffsetSpec.for_timestamp(ts)}, isolation_level=level)
    return int(res[tp].result(30).offset)


def test_timestamp_lookup_matches_the_broker(produced: Produced) -> None:
    rnd = random.Random(2)
    for d, topic in ((produced.dir, produced.topic), (produced.lat_dir, produced.lat_topic)):
        p = PartitionDir(d)
        s = checks.scan(p)
        checks.check_timestamp_lookups(p, s, rnd, samples=40)
        stamps = sorted({r.timestamp for h, r in s.records if h.last_offset < produced.open_txn_first_offset})
        for ts in [*rnd.sample(stamps, 15), stamps[0] - 10]:
            ours = find_offset_for_timestamp(p, ts)
            assert ours is not None
            assert ours.offset == _broker_offset_for(produced, topic, ts, IsolationLevel.READ_UNCOMMITTED), ts
    # the old-timestamp records make time go backwards between segments (KIP-33's hard case)
    p = PartitionDir(produced.dir)
    maxes = [p.max_timestamp(seg).timestamp for seg in p.segments]
    assert any(later < earlier for i, earlier in enumerate(maxes) for later in maxes[i + 1:])


def test_aborted_transactions(produced: Produced) -> None:
    p = PartitionDir(produced.dir)
    derived = scan_aborted_transactions(p)
    assert len(derived) == produced.aborted
    assert checks.check_txn_indexes(p, derived) == produced.aborted
    assert aborted_transactions(p, 0, p.log_end_offset()) == derived


def test_producer_snapshots(produced: Produced) -> None:
    p = PartitionDir(produced.dir)
    assert len(p.snapshot_offsets) >= 2
    assert checks.check_snapshots(p, exact_bytes=True) == len(p.snapshot_offsets)
    for seg in p.inactive_segments():
        nxt = p.next_offset(seg)
        assert snapshot_bytes_at(p, nxt) == p.snapshot_path(nxt).read_bytes()
    entries = rebuild_producer_state(p, p.log_end_offset(), use_snapshots=False).snapshot_entries()
    kinds = {(e.coordinator_epoch >= 0, e.current_txn_first_offset >= 0) for e in entries}
    assert (True, False) in kinds and (False, True) in kinds  # a finished and an open transaction
    assert any(e.last_sequence > 0 and e.coordinator_epoch == -1 for e in entries)  # idempotent producer


def test_last_stable_offset_with_open_transaction(produced: Produced) -> None:
    p = PartitionDir(produced.dir)
    st = stable_offsets(p)
    assert st.high_watermark == p.log_end_offset()
    assert st.last_stable_offset == produced.open_txn_first_offset
    tp = CkTopicPartition(produced.topic, 0)
    res = produced.admin.list_offsets({tp: OffsetSpec.latest()},
                                      isolation_level=IsolationLevel.READ_COMMITTED)
    assert res[tp].result(30).offset == st.last_stable_offset
    assert stable_offsets(PartitionDir(produced.lat_dir)).last_stable_offset == \
        PartitionDir(produced.lat_dir).log_end_offset()


def test_reading_changes_no_file(produced: Produced) -> None:
    """Readers open files read-only: a full pass leaves every closed file's bytes and mtime as they were."""
    p = PartitionDir(produced.dir)
    closed = [f for seg in p.inactive_segments() for f in (seg.log_path, seg.index_path, seg.time_index_path)]
    closed += [p.snapshot_path(o) for o in p.snapshot_offsets]

    def state() -> list[tuple[int, int]]:
        return [(f.stat().st_mtime_ns, f.stat().st_size) for f in closed]

    before = state()
    s = checks.scan(p)
    checks.check_indexes(p, s, INTERVAL)
    checks.check_snapshots(p)
    stable_offsets(p)
    assert state() == before
