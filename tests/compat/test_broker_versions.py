"""Merged mode's forwarder picks each request's version from the broker's ApiVersions answer
(fetcher.kafka.broker_versions); the real brokers of every version are in test_read_faces.py."""

from __future__ import annotations

import pytest

from fetcher.kafka import broker_versions as bv

# what Kafka 2.8.2 answers for the forwarder's requests (its ApiVersions)
KAFKA_28 = {bv.FETCH: (0, 12), bv.LIST_OFFSETS: (0, 6), bv.METADATA: (0, 11),
            bv.OFFSET_FOR_LEADER_EPOCH: (0, 4)}
# Kafka 4.x removed the oldest versions (KIP-896) and added newer ones
KAFKA_4 = {bv.FETCH: (4, 17), bv.LIST_OFFSETS: (1, 10), bv.METADATA: (0, 13),
           bv.OFFSET_FOR_LEADER_EPOCH: (2, 4)}


@pytest.mark.parametrize(
    ("ranges", "want"),
    [(KAFKA_28, {bv.FETCH: 12, bv.LIST_OFFSETS: 6, bv.METADATA: 11, bv.OFFSET_FOR_LEADER_EPOCH: 4}),
     (KAFKA_4, {bv.FETCH: 12, bv.LIST_OFFSETS: 7, bv.METADATA: 12, bv.OFFSET_FOR_LEADER_EPOCH: 4})],
    ids=["2.8", "4.x"],
)
def test_highest_version_both_know(ranges: bv.Ranges, want: dict[int, int]) -> None:
    got = {key: int(bv.request_class(ranges, key, "b:9092").__version__) for key in want}
    assert got == want


def test_no_common_version_is_one_line_naming_both_ranges() -> None:
    with pytest.raises(bv.BrokerVersionError) as e:
        bv.request_class({bv.FETCH: (13, 17)}, bv.FETCH, "b:9092")
    assert str(e.value) == (
        "broker b:9092 answers Fetch v13-v17; the Kafka endpoint's merged mode sends Fetch v5-v12")
    assert not e.value.retriable
    with pytest.raises(bv.BrokerVersionError, match="answers Metadata none"):
        bv.request_class({}, bv.METADATA, "b:9092")
