"""Beside a real broker: records read over HTTP (S3 on SeaweedFS + topic-based metadata, tiered by
the daemon's ``--once``) equal what a confluent-kafka consumer reads, in both isolation levels;
offset lookups come from remote storage inside the remote range and from the broker past it."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTp

from fetcher.http.encoders import NDJSON
from rlm.config import load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, produce_txn, s3_storage, topic_rlmm, transactional_producer
from tests.fetcher_http.conftest import serving

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def produce_mixed(bs: str, topic: str) -> None:
    """Idempotent records with headers and null keys/values around a committed and an aborted
    transaction: about 3.5 MB, so 1 MiB segments roll past the transactions."""
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2,
                  "compression.type": "lz4"})
    rnd = random.Random(7)  # incompressible values: the segments roll even with lz4
    for i in range(4000):
        headers = [("h", f"v{i}".encode()), ("empty", None)] if i % 3 == 0 else None
        p.produce(topic, key=None if i % 7 == 0 else f"k{i}".encode(),
                  value=None if i % 11 == 0 else rnd.randbytes(250), partition=0, headers=headers)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    aborting = transactional_producer(bs, f"{topic}-a")
    aborting.begin_transaction()
    for i in range(900):
        aborting.produce(topic, key=f"a{i}".encode(), value=b"a" * 300, partition=0)
    assert aborting.flush(30) == 0  # written to the log before the abort (abort purges unsent ones)
    aborting.abort_transaction(30)
    produce_txn(bs, topic, f"{topic}-c", 1200, commit=True)
    p2 = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2})
    for i in range(6000):
        p2.produce(topic, key=f"z{i}".encode(), value=b"z" * 300, partition=0)
        if i % 500 == 0:
            p2.poll(0)
    assert p2.flush(60) == 0


def consume(bs: str, topic: str, end: int, isolation: str) -> list[Row]:
    c = Consumer({"bootstrap.servers": bs, "group.id": f"{topic}-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    c.assign([CkTp(topic, 0, 0)])
    rows: list[Row] = []
    try:
        while True:
            msg = c.poll(10)
            assert msg is not None, f"consumer stalled after {rows[-1][0] if rows else None}"
            assert msg.error() is None, msg.error()
            if msg.offset() >= end:
                return rows
            rows.append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        c.close()


def http_rows(api: Any, topic: str, isolation: str) -> list[Row]:
    offset = api.get(f"/v1/topics/{topic}/partitions/0/segments").json()["log_start_offset"]
    end = api.get(f"/v1/topics/{topic}/partitions/0/segments").json()["log_end_offset"]
    rows: list[Row] = []
    while offset < end:
        r = api.get(f"/v1/topics/{topic}/partitions/0/records", NDJSON, offset=offset, max_bytes=256 * 1024,
                    isolation=isolation)
        assert r.status_code == 200, r.text
        for line in r.text.splitlines():
            o = json.loads(line)
            rows.append((o["offset"], o["timestamp"], _b(o["key"]), _b(o["value"]),
                         [(k, _b(v)) for k, v in o["headers"]]))
        offset = int(r.headers["X-Next-Offset"])
    return rows


def _b(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_http_records_equal_a_consumer(kafka: Any, seaweedfs: Any, seaweedfs_bucket: str, unique_topic: str,
                                       tmp_path: Path) -> None:
    topic, bs = unique_topic, kafka.bootstrap
    create_topic(bs, topic)
    produce_mixed(bs, topic)
    storage = s3_storage(seaweedfs, seaweedfs_bucket)
    cfg = load_config(None, log_dirs=[str(kafka.log_dir)], work_dir=str(tmp_path / "work"),
                      bootstrap_servers=bs, storage=storage, metadata=topic_rlmm(bs, tmp_path / "work"),
                      topics=[{"pattern": topic, "remote.storage.enable": True}], http={"enabled": False})
    daemon = Daemon(cfg, once=True).start()
    assert daemon.run_once() == 0
    assert daemon.stop()

    reader = load_config(None, work_dir=str(tmp_path / "reader"), bootstrap_servers=bs, storage=storage,
                         metadata=topic_rlmm(bs, tmp_path / "reader"),
                         read={"http_port": 0, "fetch_max_wait_ms": 30_000})  # cold lookups on 2 busy cores
    with serving(reader) as api:
        plan = api.get(f"/v1/topics/{topic}/partitions/0/segments").json()
        end = plan["log_end_offset"]
        assert plan["log_start_offset"] == 0 and len(plan["segments"]) >= 2 and end > 6200
        for isolation in ("read_uncommitted", "read_committed"):
            want = consume(bs, topic, end, isolation)
            got = http_rows(api, topic, isolation)
            assert len(got) == len(want) and got == want, isolation
        committed = consume(bs, topic, end, "read_committed")
        assert len(committed) < end - 900  # the aborted transaction is left out

        # offsets: inside the remote range from remote storage, equal to the broker's ListOffsets
        c = Consumer({"bootstrap.servers": bs, "group.id": f"{topic}-ts"})
        try:
            for row in committed[:: max(1, len(committed) // 10)]:
                ts = row[1]
                broker = c.offsets_for_times([CkTp(topic, 0, ts)], timeout=10)[0].offset
                body = api.get(f"/v1/topics/{topic}/offsets", timestamp=str(ts)).json()
                assert "partitions" in body, body
                part = body["partitions"][0]
                assert (part["offset"], part["source"]) == (broker, "remote")
            high = c.get_watermark_offsets(CkTp(topic, 0), timeout=10)[1]
        finally:
            c.close()
        latest = api.get(f"/v1/topics/{topic}/offsets", timestamp="latest").json()["partitions"][0]
        assert (latest["offset"], latest["source"]) == (high, "broker")
