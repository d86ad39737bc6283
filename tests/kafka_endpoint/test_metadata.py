"""Metadata and ListOffsets on the wire: real topic ids, the endpoint as leader, stable epochs."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tests.kafka_endpoint.conftest import PARTITIONS, TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _connect
from tests.kafka_endpoint.test_groups import _call


def test_metadata_names_real_ids_and_the_lineage_epoch(served: Served) -> None:
    tps = served.fetcher.topics()[TOPIC]
    with _connect(served.endpoint.port) as s:
        md = _call(
            s,
            3,
            12,
            1,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        again = _call(
            s,
            3,
            12,
            2,
            topics=lambda m: (m.MetadataRequestTopic(topic_id=None, name="nope"),),
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        by_id = _call(
            s,
            3,
            12,
            3,
            topics=lambda m: (m.MetadataRequestTopic(topic_id=md.topics[0].topic_id, name=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, "127.0.0.1", served.endpoint.port)]
    (t,) = md.topics
    assert t.name == TOPIC and t.topic_id == uuid.UUID(bytes=tps[0].topic_id.raw)
    parts = {p.partition_index: p for p in t.partitions}
    assert sorted(parts) == list(range(PARTITIONS))
    assert all(p.leader_id == 0 and tuple(p.isr_nodes) == (0,) for p in parts.values())
    assert parts[0].leader_epoch == 3 and parts[1].leader_epoch == 0  # partition 0 changed epoch
    assert [(x.name, x.error_code) for x in again.topics] == [("nope", ErrorCode.unknown_topic_or_partition)]
    assert [x.name for x in by_id.topics] == [TOPIC]


def test_list_offsets_earliest_latest_and_unknown(served: Served) -> None:
    with _connect(served.endpoint.port) as s:
        got = _call(
            s,
            2,
            7,
            1,
            replica_id=-1,
            isolation_level=1,
            topics=lambda m: (
                m.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2),
                        m.ListOffsetsPartition(partition_index=1, current_leader_epoch=-1, timestamp=-1),
                        m.ListOffsetsPartition(partition_index=7, current_leader_epoch=-1, timestamp=-1),
                    ),
                ),
            ),
        )
    rows = [(p.partition_index, p.error_code, p.offset) for t in got.topics for p in t.partitions]
    assert rows == [
        (0, ErrorCode.none, 0),
        (1, ErrorCode.none, served.expected.log_end[1]),
        (7, ErrorCode.unknown_topic_or_partition, -1),
    ]
