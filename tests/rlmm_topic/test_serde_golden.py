"""Serde golden tests against Kafka's own ``RemoteLogMetadataSerde`` (both directions).

(b) Kafka serializes records built from given fields; we must decode the same fields and
re-encode the same bytes. Kafka also decodes what we serialize back to the same fields.
"""

from __future__ import annotations

import functools
import re

import pytest
from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from rlmm.serde import deserialize, serialize
from tests.rlmm_topic.golden import KafkaGolden
from tests.rlmm_topic.specs import kafka_to_string, random_records, spec
from tests.services.kafka import KafkaCluster


def test_kafka_serialized_bytes_decode_and_reencode_identically(kafka_golden: KafkaGolden) -> None:
    records = random_records(seed=405, per_kind=60)
    specs = [spec(r) for r in records]
    kafka_hex = kafka_golden.run("serialize", specs)
    for s, h, ours in zip(specs, kafka_hex, records, strict=True):
        data = bytes.fromhex(h)
        decoded = deserialize(data, partition=0, offset=0)
        assert spec(decoded) == s
        assert serialize(decoded) == data, s
        assert serialize(ours) == data, s


def test_kafka_decodes_our_bytes_to_the_same_fields(kafka_golden: KafkaGolden) -> None:
    records = random_records(seed=1234, per_kind=60)
    ours_hex = [serialize(r).hex() for r in records]
    decoded_by_kafka = kafka_golden.run("deserialize", ours_hex)
    assert decoded_by_kafka == [spec(r) for r in records]


def test_worked_example_bytes(kafka_golden: KafkaGolden) -> None:
    # kafka-tiered-storage.md §2.4, now confirmed by Kafka's serializer.
    s = ("SEG AAECAwQFBgcICQoLDA0ODw foo 0 EBESExQVFhcYGRobHB0eHw 0 99 1700000000000 1 1700000001000 "
         "4096 0 - 0 0:0,3:50")
    (h,) = kafka_golden.run("serialize", [s])
    assert len(bytes.fromhex(h)) == 115
    assert spec(deserialize(bytes.fromhex(h))) == s


FORMATTER = ("org.apache.kafka.server.log.remote.metadata.storage.serialization."
             "RemoteLogMetadataSerde$RemoteLogMetadataFormatter")
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


@pytest.mark.kafka
def test_kafka_formatter_reads_what_we_produced(kafka: KafkaCluster, unique_topic: str) -> None:
    """(a) Records we produce (key null, value = our bytes) are printed by Kafka's own formatter,
    run by Kafka's console consumer, with exactly the fields we wrote."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(unique_topic, 3, 1)])[unique_topic].result(timeout=60)
    records = random_records(seed=99, per_kind=10)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "enable.idempotence": True})
    delivered: list[tuple[int, int, str]] = []

    def on_delivery(err: object, msg: Message, *, text: str) -> None:
        assert err is None, err
        delivered.append((msg.partition() or 0, msg.offset() or 0, text))

    for i, r in enumerate(records):
        text = kafka_to_string(r)
        producer.produce(unique_topic, value=serialize(r), partition=i % 3,
                         on_delivery=functools.partial(on_delivery, text=text))
    assert producer.flush(30) == 0
    expected = {(p, o): t for p, o, t in delivered}
    assert len(expected) == len(records)
    res = kafka.run_class(CONSOLE_CONSUMER, "--bootstrap-server", kafka.bootstrap,
                          "--topic", unique_topic, "--from-beginning", "--max-messages", str(len(records)),
                          "--timeout-ms", "60000", "--formatter", FORMATTER)
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[tuple[int, int], str] = {}
    for line in res.stdout.splitlines():
        m = re.fullmatch(r"partition: (\d+), offset: (\d+), value: (.*)", line)
        if m:
            got[(int(m[1]), int(m[2]))] = m[3]
    assert got == expected
