"""The Kafka-protocol endpoint over Aiven's layout: a confluent-kafka consumer (the same client
that recorded the fixture) reading every partition from offset 0 receives exactly what it
received from the broker, at both isolation levels."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from fetcher import RemoteFetcher
from rlm.commands.kafka_serve import start_kafka_listener
from rlm.config import load_config
from tests.aiven.helpers import VARIANTS, expected
from tests.aiven.test_read_faces import _partitions
from tests.fixtures.aiven.build import record_digest


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _consume(bootstrap: str, parts: list[tuple[str, int]], level: str, want: int) -> list[dict[str, Any]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"aiven-{level}", "enable.auto.commit": False,
                  "isolation.level": level, "enable.partition.eof": True})
    c.assign([TopicPartition(t, p, 0) for t, p in parts])
    rows: list[dict[str, Any]] = []
    eof: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 120
    try:
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add((m.topic(), m.partition()))
                    continue
                raise AssertionError(str(m.error()))
            ts_type, ts = m.timestamp()
            headers = m.headers()
            rows.append({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                         "timestamp": ts, "timestamp_type": ts_type, "leader_epoch": m.leader_epoch(),
                         "digest": record_digest(_b64(m.key()), _b64(m.value()),
                                                 [[k, _b64(v)] for k, v in headers or []])})
    finally:
        c.close()
    assert len(eof) == len(parts), f"no EOF on {set(parts) - eof} after {len(rows)}/{want} records"
    return rows


@pytest.mark.parametrize("variant", VARIANTS)
def test_confluent_kafka_reads_what_it_read_from_the_broker(
        variant: str, aiven_configs: dict[str, Path], tmp_path: Path) -> None:
    fetcher = RemoteFetcher.from_config(load_config(aiven_configs[variant]))
    endpoint = start_kafka_listener(fetcher, "127.0.0.1", 0, state_dir=tmp_path / "endpoint")
    try:
        for level in ("read_uncommitted", "read_committed"):
            want = expected(variant, level)
            got = _consume(endpoint.bootstrap, _partitions(variant), level, len(want))
            key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
            assert sorted(got, key=key) == sorted(want, key=key)
    finally:
        endpoint.close()
        fetcher.close()
