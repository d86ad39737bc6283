"""The Kafka-protocol endpoint over Aiven's layout: a confluent-kafka consumer (the same client
that recorded the fixture) reading every partition from offset 0 receives exactly what it
received from the broker, at both isolation levels."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from fetcher import RemoteFetcher
from rlm.commands.kafka_serve import start_kafka_listener
from rlm.config import load_config
from tests.aiven.helpers import VARIANTS, expected, topics_in, variant_dir
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
        _check_offsets_for_times(endpoint.bootstrap, variant)
    finally:
        endpoint.close()
        fetcher.close()


def _check_offsets_for_times(bootstrap: str, variant: str) -> None:
    """ListOffsets by timestamp through the endpoint: the broker's recorded answers."""
    asked = [q for q in json.loads((variant_dir(variant) / "offsets_for_times.json").read_text())
             if q["topic"] in topics_in(variant) and q["isolation"] == "read_uncommitted"]
    by_partition: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for q in asked:
        by_partition.setdefault((q["topic"], q["partition"]), []).append(q)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "aiven-times", "enable.auto.commit": False})
    checked = 0
    try:
        for i in range(max(len(v) for v in by_partition.values())):
            # one timestamp per partition and request (a request names each partition once)
            batch = [v[i] for v in by_partition.values() if i < len(v)]
            got = c.offsets_for_times([TopicPartition(q["topic"], q["partition"], q["query_timestamp"])
                                       for q in batch], timeout=60)
            for tp in got:
                q = next(x for x in batch if (x["topic"], x["partition"]) == (tp.topic, tp.partition))
                assert tp.error is None, tp
                assert tp.offset == q["offset"], q
                checked += 1
    finally:
        c.close()
    assert checked == len(asked) > 0
