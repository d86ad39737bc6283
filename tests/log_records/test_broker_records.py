"""Records a real broker wrote (via confluent-kafka) decode to exactly what was produced.

Every producer codec, headers (null values), null keys and values, an idempotent producer,
committed and aborted transactions, and a LogAppendTime topic. The broker's own ``.log`` files
are read with iter_records and read_arrow; both must agree with the delivery reports.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.log import (
    KAFKA_SCHEMA,
    Compression,
    ControlRecord,
    ControlRecordType,
    Record,
    TimestampType,
    iter_batches,
    read_arrow,
)
from rlm.log._arrow_build import records_batch
from rlm.log.records import iter_records
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _create(admin: AdminClient, topic: str, **config: str) -> None:
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        f.result(30)


def _produce(p: Producer, topic: str, n: int, *, tag: str, created: dict[int, Record]) -> None:
    """Produce ``n`` varied records; ``created`` gets each one at the offset its delivery report gives."""

    def on_delivery(headers: tuple[tuple[str, bytes | None], ...]):  # type: ignore[no-untyped-def]
        def done(err: object, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            ts_type, ts = msg.timestamp()
            created[msg.offset()] = Record(
                msg.offset(), ts, TimestampType(ts_type - 1), msg.key(), msg.value(), headers
            )

        return done

    base = int(time.time() * 1000) - 10_000
    for i in range(n):
        key = None if i % 5 == 1 else f"{tag}-k{i}".encode()
        value = None if i % 7 == 3 else (f"{tag}-v{i}-".encode() * (i % 9 + 1))
        headers = [("h", f"{i}".encode()), ("null", None), ("ü", b"")] if i % 3 == 0 else []
        p.produce(
            topic,
            key=key,
            value=value,
            headers=headers or None,
            timestamp=base + (i * 13) % 500,
            on_delivery=on_delivery(tuple(headers)),
        )
        if i % 20 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _segments(kafka: KafkaCluster, topic: str) -> list[Path]:
    return sorted((kafka.log_dir / f"{topic}-0").glob("*.log"))


def _read(kafka: KafkaCluster, topic: str) -> tuple[list[Record], list[ControlRecord], pa.Table]:
    records: list[Record] = []
    controls: list[ControlRecord] = []
    tables = []
    for seg in _segments(kafka, topic):
        for _h, r in iter_records(seg):
            (controls if isinstance(r, ControlRecord) else records).append(r)  # type: ignore[arg-type]
        tables.append(read_arrow(seg, topic=topic, partition=0))
    return records, controls, pa.concat_tables(tables)


@pytest.fixture(scope="module")
def admin(kafka: KafkaCluster) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka.bootstrap})


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_decodes_to_what_was_produced(
    kafka: KafkaCluster, admin: AdminClient, codec: str
) -> None:
    topic = f"rec-{codec}-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    created: dict[int, Record] = {}
    p = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "enable.idempotence": codec in ("lz4", "zstd"),
            "batch.size": 16384,
        }
    )
    _produce(p, topic, 300, tag=codec, created=created)
    records, controls, table = _read(kafka, topic)
    assert controls == []
    assert records == [created[o] for o in sorted(created)]
    headers = [h for seg in _segments(kafka, topic) for h in iter_batches(seg)]
    assert {h.compression for h in headers} == {Compression[codec.upper()]}
    assert len(headers) < 300  # really batched
    if codec in ("lz4", "zstd"):
        assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
    assert table.equals(pa.Table.from_batches([records_batch(topic, 0, records)], schema=KAFKA_SCHEMA))


def test_transactions_and_markers(kafka: KafkaCluster, admin: AdminClient) -> None:
    topic = f"rec-txn-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    p = Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}", "compression.type": "lz4"}
    )
    p.init_transactions(60)
    created: dict[int, Record] = {}
    p.begin_transaction()
    _produce(p, topic, 30, tag="commit", created=created)
    p.commit_transaction(60)
    p.begin_transaction()
    aborted: dict[int, Record] = {}
    _produce(p, topic, 20, tag="abort", created=aborted)
    p.abort_transaction(60)
    deadline = time.monotonic() + 60
    records, controls, table = _read(kafka, topic)
    while len(controls) < 2 and time.monotonic() < deadline:  # the coordinator writes markers asynchronously
        time.sleep(0.2)
        records, controls, table = _read(kafka, topic)
    # aborted records stay in the log (and are rows, as Spark's source returns them read_uncommitted)
    assert records == [{**created, **aborted}[o] for o in sorted({**created, **aborted})]
    assert [c.type for c in controls] == [ControlRecordType.COMMIT, ControlRecordType.ABORT]
    assert controls[0].offset == max(created) + 1 and controls[1].offset == max(aborted) + 1
    assert all(c.coordinator_epoch is not None and c.coordinator_epoch >= 0 for c in controls)
    headers = [h for seg in _segments(kafka, topic) for h in iter_batches(seg)]
    assert all(h.is_transactional for h in headers)
    assert [h.is_control for h in headers].count(True) == 2
    assert table.num_rows == len(records)
    assert sorted(table.column("offset").to_pylist()) == sorted(r.offset for r in records)


def test_log_append_time_topic(kafka: KafkaCluster, admin: AdminClient) -> None:
    topic = f"rec-lat-{uuid.uuid4().hex[:8]}"
    _create(admin, topic, **{"message.timestamp.type": "LogAppendTime"})
    created: dict[int, Record] = {}
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": "zstd", "linger.ms": 20})
    _produce(p, topic, 100, tag="lat", created=created)
    records, _, table = _read(kafka, topic)
    assert all(r.timestamp_type == TimestampType.LOG_APPEND_TIME and r.timestamp >= before for r in records)
    by_batch = {h.base_offset: h for seg in _segments(kafka, topic) for h in iter_batches(seg)}
    for r in records:
        h = next(h for h in by_batch.values() if h.base_offset <= r.offset <= h.last_offset)
        assert r.timestamp == h.max_timestamp
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (c.offset, c.key, c.value, c.headers) for c in (created[o] for o in sorted(created))
    ]
    assert set(table.column("timestampType").to_pylist()) == {1}
