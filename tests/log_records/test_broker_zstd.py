"""zstd segments written by a real broker, from Kafka's Java producer and from librdkafka, decode
identically with every libzstd (zstandard's wheel, the OS library), without one and un-jitted.

Kafka's Java producer streams zstd (zstd-jni's output stream), and so does librdkafka: their
frames carry no content size, which the tests check is really the framing they read (frames with
a content size, as kafka-python writes them, are covered by ``test_libzstd``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.log import Compression, _zstd, iter_batches, read_arrow
from rlm.log.model import RECORD_BATCH_OVERHEAD
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LIBS = {
    "wheel": _zstd.open_library(_zstd._wheel_library() or "-"),
    "os": _zstd.open_library("libzstd.so.1"),
    "none": None,
}


@pytest.fixture(scope="module")
def admin(kafka: KafkaCluster) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": kafka.bootstrap})


def _create(admin: AdminClient, topic: str) -> None:
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)


def _value(i: int) -> str:
    return f"value-{i}-" + "abcdefghij"[i % 10] * (i % 90 + 10)


def _frame_flags(seg: Path) -> tuple[set[bool], int]:
    """Whether each zstd frame declares its content size; and the number of batches."""
    data = seg.read_bytes()
    headers = list(iter_batches(data))
    assert headers and {h.compression for h in headers} == {Compression.ZSTD}
    flags = set()
    for h in headers:
        fhd = data[h.position + RECORD_BATCH_OVERHEAD + 4]
        flags.add(bool(fhd >> 6) or bool(fhd & 0x20))  # FCS flag, or single segment (implies FCS)
    return flags, len(headers)


def _every_path(seg: Path, topic: str, monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    tables = {}
    for name, lib in LIBS.items():
        if lib is None and name != "none":
            continue
        pool = _zstd.DCtxPool(lib) if lib is not None else None
        monkeypatch.setattr(_zstd, "pool", lambda pool=pool: pool)
        tables[name] = read_arrow(seg, topic=topic, partition=0)
        tables[name + "-pure"] = read_arrow(seg, topic=topic, partition=0, pure_python=True)
    first = tables["none"]
    assert all(t.equals(first) for t in tables.values()), sorted(tables)
    return first


def test_java_producer_zstd_segment(
    kafka: KafkaCluster, admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"zstd-java-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    n = 3000
    lines = "".join(f"k{i}:{_value(i)}\n" for i in range(n))
    kafka.run_class(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        kafka.bootstrap,
        "--topic",
        topic,
        "--compression-codec",
        "zstd",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--producer-property",
        "linger.ms=200",
        "--producer-property",
        "batch.size=16384",
        input=lines.encode(),
        check=True,
        timeout=120,
    )
    (seg,) = sorted((kafka.log_dir / f"{topic}-0").glob("*.log"))
    flags, batches = _frame_flags(seg)
    assert flags == {False}, "Java's producer streams zstd: no content size in its frames"
    assert batches > 1
    table = _every_path(seg, topic, monkeypatch)
    assert table.column("offset").to_pylist() == list(range(n))
    assert table.column("key").to_pylist() == [f"k{i}".encode() for i in range(n)]
    assert table.column("value").to_pylist() == [_value(i).encode() for i in range(n)]


def test_librdkafka_zstd_segment(
    kafka: KafkaCluster, admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"zstd-rdk-{uuid.uuid4().hex[:8]}"
    _create(admin, topic)
    p = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "compression.type": "zstd",
            "linger.ms": 50,
            "batch.size": 16384,
        }
    )
    n = 2000
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=_value(i).encode())
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    (seg,) = sorted((kafka.log_dir / f"{topic}-0").glob("*.log"))
    flags, batches = _frame_flags(seg)
    assert flags == {False}, "librdkafka streams zstd too (frames with content size: see test_libzstd)"
    assert batches > 1
    table = _every_path(seg, topic, monkeypatch)
    assert table.column("value").to_pylist() == [_value(i).encode() for i in range(n)]
