"""The real Kafka broker from Maven jars: produce/consume, Kafka's own tools, the 3-node mode."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.services.kafka import KafkaCluster, dump_log_segments, dump_problems

pytestmark = pytest.mark.kafka


def _create(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, rf, config={"segment.bytes": "1048576"})])[topic]
    fut.result(30)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode())
    assert p.flush(30) == 0


def _consume(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[tuple[int, bytes, bytes]] = []
    try:
        for _ in range(600):
            if len(out) >= n:
                break
            for m in c.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def test_produce_consume_1000(kafka: KafkaCluster, unique_topic: str) -> None:
    _create(kafka.bootstrap, unique_topic)
    _produce(kafka.bootstrap, unique_topic, 1000)
    got = _consume(kafka.bootstrap, unique_topic, 1000)
    assert [o for o, _, _ in got] == list(range(1000))
    assert got[999][1:] == (b"k999", b"value-999")
    assert (kafka.log_dir / f"{unique_topic}-0" / "00000000000000000000.log").stat().st_size > 0


def test_kafka_dump_log_segments_reads_broker_files(kafka: KafkaCluster, unique_topic: str) -> None:
    _create(kafka.bootstrap, unique_topic)
    _produce(kafka.bootstrap, unique_topic, 50)
    seg = kafka.log_dir / f"{unique_topic}-0" / "00000000000000000000.log"
    res = dump_log_segments(seg, extra=("--deep-iteration", "--print-data-log"))
    assert "payload: value-49" in res.stdout
    assert dump_problems(res) == []


def test_dump_problems_detects_corruption(kafka: KafkaCluster, unique_topic: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _create(kafka.bootstrap, unique_topic)
    _produce(kafka.bootstrap, unique_topic, 20)
    data = bytearray((kafka.log_dir / f"{unique_topic}-0" / "00000000000000000000.log").read_bytes())
    data[-3] ^= 0xFF  # inside the CRC-covered records of the last batch
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(bytes(data))
    res = dump_log_segments(bad, extra=("--deep-iteration",))
    assert dump_problems(res), res.stdout[-2000:]


@pytest.mark.slow
def test_three_node_cluster_leader_failover(unique_topic: str) -> None:
    cluster = KafkaCluster(nodes=3, name="kafka3").start()
    try:
        _create(cluster.bootstrap, unique_topic, partitions=1, rf=3)
        _produce(cluster.bootstrap, unique_topic, 100)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        leader = admin.list_topics(unique_topic, timeout=10).topics[unique_topic].partitions[0].leader
        assert leader in cluster.node_ids
        cluster.stop_node(leader)
        alive = ",".join(f"127.0.0.1:{cluster.node(i).broker_port}" for i in cluster.node_ids if i != leader)
        new_leader = leader
        for _ in range(120):
            md = AdminClient({"bootstrap.servers": alive}).list_topics(unique_topic, timeout=10)
            new_leader = md.topics[unique_topic].partitions[0].leader
            if new_leader not in (leader, -1):
                break
            import time

            time.sleep(0.5)
        assert new_leader not in (leader, -1)
        _produce(alive, unique_topic, 100)
        assert len(_consume(alive, unique_topic, 200)) == 200
    finally:
        cluster.stop()
