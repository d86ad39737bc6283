"""When a broker log start is a DeleteRecords bound, and the published object's format.

The end-to-end behaviour is tested against a real broker in tests/fetcher_e2e/test_log_start.py;
these pin the rule for the cases that broker run cannot produce on demand (another leader's
retention propagated to a replica, retention past a copy gap) and the object's failure modes.
"""

from __future__ import annotations

import json

import pytest

from rlm.errors import RemoteStorageIntegrityError
from rlm.log.log_start import deletion_bound
from rlm.types import KafkaUuid, TopicIdPartition
from rsm_plugins import log_start

REMOTE = [(0, 999), (1000, 1999), (2000, 2999)]  # remote segments on the lineage; remote end 3000


@pytest.mark.parametrize(
    ("candidate", "local_first", "expected", "why"),
    [
        (2185, 2000, 2185, "inside a segment, above the first local segment: only DeleteRecords"),
        (2185, None, 2185, "inside a remote segment, no log dir: local retention never stops there"),
        (2000, 1000, None, "a remote segment's start: another leader's retention leaves it there"),
        (2000, None, None, "a remote segment's start, no log dir"),
        (2000, 2000, None, "the first local segment's base: this broker's retention"),
        (3000, 2000, None, "the remote end: retention of every tiered segment"),
        (3500, 3000, 3500, "past the remote end, above the first local segment: DeleteRecords"),
        (3500, None, None, "past the remote end, no log dir: could be retention past a copy gap"),
        (0, None, None, "the remote start: nothing below it"),
        (None, 2000, None, "no answer"),
    ],
)
def test_deletion_bound(
    candidate: int | None, local_first: int | None, expected: int | None, why: str
) -> None:
    assert deletion_bound(candidate, REMOTE, local_first) == expected, why


TP = TopicIdPartition(KafkaUuid.random(), "orders", 3)


def test_object_round_trip() -> None:
    data = log_start.encode(TP, 2793, 1_764_165_000_000)
    assert log_start.decode(TP, data, "x") == 2793
    doc = json.loads(data)
    assert doc == {"version": 1, "topic": "orders", "topic_id": TP.topic_id.text, "partition": 3,
                   "log_start_offset": 2793, "updated_ms": 1_764_165_000_000}


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b"[]",
        json.dumps({"version": 2, "topic": "orders", "partition": 3, "log_start_offset": 1}).encode(),
        log_start.encode(TopicIdPartition(TP.topic_id, "orders", 4), 5, 0),  # another partition's
        log_start.encode(TopicIdPartition(KafkaUuid.random(), "orders", 3), 5, 0),  # a re-created topic's
        log_start.encode(TP, 5, 0).replace(b'"log_start_offset": 5', b'"log_start_offset": -5'),
        log_start.encode(TP, 5, 0) + b" " * log_start.MAX_BYTES,
    ],
)
def test_object_corrupt(data: bytes) -> None:
    with pytest.raises(RemoteStorageIntegrityError):
        log_start.decode(TP, data, "s3://bucket/key")
