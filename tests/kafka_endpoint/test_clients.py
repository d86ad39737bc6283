"""Unmodified Kafka clients read the tiered history through the endpoint, record for record.

confluent-kafka (assign + seek, subscribe with a group and committed offsets, both isolation
levels), kafka-python, and Kafka's own Java console consumer and GetOffsetShell from the jars.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from tests.kafka_endpoint._endpoint_process import EndpointProcess
from tests.kafka_endpoint.conftest import PARTITIONS, TOPIC, Served
from tests.services.kafka import run_tool

Rows = dict[int, list[tuple[int, bytes | None, bytes | None]]]
_GIVE_UP_S = 90  # only so a broken endpoint fails instead of hanging; no assertion on time


def _expected(served: Served, isolation: str) -> Rows:
    e = served.expected
    return e.committed if isolation == "read_committed" else e.uncommitted


def _consume(c: Any, want: Rows) -> Rows:
    """Poll until every partition delivered its last expected offset."""
    got: Rows = {p: [] for p in want}
    last = {p: rows[-1][0] for p, rows in want.items()}
    done: set[int] = set()
    give_up = time.monotonic() + _GIVE_UP_S
    while len(done) < len(want) and time.monotonic() < give_up:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            continue
        got[m.partition()].append((m.offset(), m.key(), m.value()))
        if m.offset() >= last[m.partition()]:
            done.add(m.partition())
    return got


def _conf(served: Served, isolation: str, group: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": served.bootstrap,
        "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_confluent_assign_seek(served: Served, isolation: str) -> None:
    want = _expected(served, isolation)
    c = Consumer(_conf(served, isolation))
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got = _consume(c, want)
        low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    finally:
        c.close()
    assert got == want
    assert (low, high) == (0, served.expected.log_end[0])


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_confluent_subscribe_group_commits(served: Served, isolation: str) -> None:
    """A subscribing member (rebalance callbacks) — so against an endpoint process, never a thread
    of this interpreter (see tests/kafka_endpoint/_endpoint_process.py)."""
    want = _expected(served, isolation)
    group = f"sub-{isolation}-{uuid.uuid4().hex[:6]}"
    ep = EndpointProcess(served.work / "logs", served.work / "work", served.work / f"sub-{group}", {})
    try:
        c = Consumer({**_conf(served, isolation, group), "bootstrap.servers": ep.bootstrap})
        try:
            c.subscribe([TOPIC])
            got = _consume(c, want)
            c.commit(asynchronous=False)
        finally:
            c.close()
        # A new member of the same group starts from the committed positions.
        c2 = Consumer({**_conf(served, isolation, group), "bootstrap.servers": ep.bootstrap})
        try:
            committed = c2.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        finally:
            c2.close()
    finally:
        ep.close()
    assert got == want
    assert {tp.partition: tp.offset for tp in committed} == {p: rows[-1][0] + 1 for p, rows in want.items()}


def test_confluent_beginning_and_timestamps(served: Served) -> None:
    c = Consumer(_conf(served, "read_uncommitted"))
    try:
        c.assign([TopicPartition(TOPIC, 1, OFFSET_BEGINNING)])
        first = None
        while first is None:
            m = c.poll(5.0)
            if m is not None and not m.error():
                first = m
        stamps = served.expected.timestamps[1]
        o, ts = stamps[len(stamps) // 2]
        found = c.offsets_for_times([TopicPartition(TOPIC, 1, ts)], timeout=10)[0]
        # KIP-33: the first offset whose timestamp is >= ts
        assert found.offset == next(off for off, t in stamps if t >= ts) <= o
        late = c.offsets_for_times([TopicPartition(TOPIC, 1, stamps[-1][1] + 10_000)], timeout=10)[0]
        assert late.offset == -1  # later than every record: Kafka's "no such offset"
    finally:
        c.close()
    assert first.offset() == served.expected.uncommitted[1][0][0]


def test_kafka_python_consumer(served: Served) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    want = _expected(served, "read_committed")
    c = KafkaConsumer(
        bootstrap_servers=served.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        consumer_timeout_ms=10_000,
    )
    try:
        tps = [KTP(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got: Rows = {p: [] for p in range(PARTITIONS)}
        last = {p: rows[-1][0] for p, rows in want.items()}
        give_up = time.monotonic() + _GIVE_UP_S
        while any(not got[p] or got[p][-1][0] < last[p] for p in got) and time.monotonic() < give_up:
            for tp, msgs in c.poll(timeout_ms=1000).items():
                got[tp.partition].extend((m.offset, m.key, m.value) for m in msgs)
        ends = c.end_offsets(tps)
    finally:
        c.close()
    assert got == want
    assert {tp.partition: off for tp, off in ends.items()} == served.expected.log_end


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_java_console_consumer(served: Served, isolation: str) -> None:
    want = _expected(served, isolation)
    total = sum(len(rows) for rows in want.values())
    res = run_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        served.bootstrap,
        "--topic",
        TOPIC,
        "--from-beginning",
        "--isolation-level",
        isolation,
        "--max-messages",
        str(total),
        "--timeout-ms",
        "60000",
        "--property",
        "print.key=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.value=false",
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in want}
    for line in res.stdout.splitlines():  # Partition:P<TAB>Offset:O<TAB>key
        part, off, key = line.split("\t")
        got[int(part.split(":")[1])].append((int(off.split(":")[1]), key.encode()))
    assert got == {p: [(o, k) for o, k, _ in rows] for p, rows in want.items()}, res.stderr[-3000:]


@pytest.mark.slow
def test_java_get_offsets_by_time(served: Served) -> None:
    stamps = served.expected.timestamps[0]
    _, ts = stamps[len(stamps) // 3]
    out = {}
    for spec in ("-2", "-1", str(ts)):
        res = run_tool(
            "org.apache.kafka.tools.GetOffsetShell",
            "--bootstrap-server",
            served.bootstrap,
            "--topic-partitions",
            f"{TOPIC}:0",
            "--time",
            spec,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        out[spec] = int(res.stdout.strip().split(":")[-1])
    assert out["-2"] == 0
    assert out["-1"] == served.expected.log_end[0]
    assert out[str(ts)] == next(off for off, t in stamps if t >= ts)


def test_out_of_range_resets_by_policy(served: Served) -> None:
    """An offset past the remote end gets OFFSET_OUT_OF_RANGE; the client applies auto.offset.reset."""
    c = Consumer(_conf(served, "read_uncommitted", **{"auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition(TOPIC, 1, served.expected.log_end[1] + 1000)])
        first = None
        give_up = time.monotonic() + _GIVE_UP_S
        while first is None and time.monotonic() < give_up:
            m = c.poll(1.0)
            if m is not None and not m.error():
                first = m
    finally:
        c.close()
    assert first is not None and first.offset() == served.expected.uncommitted[1][0][0]
