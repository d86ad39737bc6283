"""Shared helpers for the daemon tests: produce real data, check remote against local, hash dirs."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from rlm.log.partition import PartitionDir
from rlm.log.records import iter_batches
from rlm.types import IndexType, RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Endpoint

SEGMENT_BYTES = 1048576
CONSUME_GIVE_UP_S = 120  # only so a broken server fails instead of hanging
ConsumedRow = tuple[int, bytes | None, bytes | None]


def create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    conf = {"segment.bytes": str(SEGMENT_BYTES), **config}
    admin.create_topics([NewTopic(topic, partitions, rf, config=conf)])[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} has no leaders")


def set_topic_config(bootstrap: str, topic: str, **conf: str) -> None:
    """Set topic configs incrementally (``retention_bytes="1"`` or ``**{"retention.bytes": "1"}``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in conf.items()
        ],
    )
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(60)

def produce(bootstrap: str, topic: str, n: int, size: int = 200, partition: int = 0, **conf: Any) -> None:
    """``n`` records of ``size`` bytes from an idempotent producer (small batches, so indexes fill)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.size": 16384,
            **conf,
        }
    )
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=bytes([65 + i % 26]) * size, partition=partition)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2, "batch.size": 16384}
    )
    p.init_transactions(30)
    return p


def produce_txn(bootstrap: str, topic: str, txn_id: str, n: int, commit: bool, size: int = 300) -> None:
    p = transactional_producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=b"t" * size, key=f"t{i}".encode(), partition=0)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def dir_digest(path: Path) -> dict[str, str]:
    """name → sha256 of every file in a partition dir (the broker must be idle while comparing)."""
    out = {}
    for f in sorted(path.iterdir()):
        if f.is_file():
            out[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def s3_storage(server: S3Endpoint, bucket: str, prefix: str = "t/") -> dict[str, Any]:
    return {
        "plugin": "s3",
        "config": {
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": server.endpoint_url,
            "region": REGION,
            "path_style": True,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "max_attempts": 2,
            "connect_timeout": 2.0,
            "read_timeout": 10.0,
        },
    }


def topic_rlmm(bootstrap: str, work: Path, partitions: int = 3) -> dict[str, Any]:
    return {
        "manager": "topic",
        "config": {
            "bootstrap.servers": bootstrap,
            "log.dir": str(work / "rlmm"),
            "remote.log.metadata.topic.num.partitions": partitions,
            "remote.log.metadata.topic.replication.factor": 1,
            "remote.log.metadata.consume.wait.ms": 30000,
        },
    }


def finished(rlmm: Any, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    return sorted(
        (
            m
            for m in rlmm.list_remote_log_segments(tp)
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
        key=lambda m: m.start_offset,
    )


def read_all(stream: Any) -> bytes:
    with stream as s:
        return bytes(s.read())


def check_segment_against_local(
    rsm: Any, md: RemoteLogSegmentMetadata, pdir: PartitionDir, local_copy: dict[str, bytes] | None = None
) -> None:
    """Remote .log/indexes byte-identical to the broker's; offsets, size, max timestamp, epochs right."""
    seg = next(s for s in pdir.segments if s.base_offset == md.start_offset)
    nxt = pdir.next_segment(seg)
    assert nxt is not None, "the active segment must never be copied"
    assert md.end_offset == nxt.base_offset - 1
    files = local_copy or {
        "log": seg.log_path.read_bytes(),
        "index": seg.index_path.read_bytes(),
        "timeindex": seg.time_index_path.read_bytes(),
    }
    assert md.segment_size_in_bytes == len(files["log"])
    assert read_all(rsm.fetch_log_segment(md, 0)) == files["log"]
    assert read_all(rsm.fetch_index(md, IndexType.OFFSET)) == files["index"]
    assert read_all(rsm.fetch_index(md, IndexType.TIMESTAMP)) == files["timeindex"]
    max_ts = max(h.max_timestamp for h in iter_batches(seg.log_path))
    assert md.max_timestamp_ms == max_ts
    assert list(md.segment_leader_epochs) == pdir.epochs_for_range(md.start_offset, nxt.base_offset)
    snap = pdir.snapshot_path(nxt.base_offset)
    if snap.exists():
        assert read_all(rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT)) == snap.read_bytes()
    txn = seg.txn_index_path
    if txn.exists() and txn.stat().st_size > 0:
        assert read_all(rsm.fetch_index(md, IndexType.TRANSACTION)) == txn.read_bytes()
        assert not md.txn_index_empty
    epochs_text = read_all(rsm.fetch_index(md, IndexType.LEADER_EPOCH)).decode()
    assert epochs_text.startswith("0\n")


def consume_partition(bootstrap: str, topic: str, offset: int = 0, isolation: str = "read_uncommitted", *,
                      until: int | None = None, keys: set[bytes] | None = None) -> list[ConsumedRow]:
    """(offset, key, value) of what a confluent-kafka consumer assigned partition 0 at ``offset``
    reads: until an end of partition at or past ``until`` (the first end of partition when neither
    ``until`` nor ``keys`` is given), or until every key of ``keys`` was seen. The one consumer
    loop of the tests that compare a server's answer with the broker's."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    got: list[ConsumedRow] = []
    seen: set[bytes] = set()
    try:
        c.assign([CkTopicPartition(topic, 0, offset)])
        give_up = time.monotonic() + CONSUME_GIVE_UP_S
        while time.monotonic() < give_up:
            m = c.poll(1.0)
            if m is None:
                continue
            err, at = m.error(), m.offset()
            assert at is not None, m
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                if (until is None and keys is None) or (until is not None and at >= until):
                    return got
                continue
            got.append((at, m.key(), m.value()))
            seen.add(m.key() or b"")
            if keys is not None and keys <= seen:
                return got
        raise AssertionError(f"{topic}: the read from {offset} did not end within {CONSUME_GIVE_UP_S} s "
                             f"({len(got)} records)")
    finally:
        c.close()
