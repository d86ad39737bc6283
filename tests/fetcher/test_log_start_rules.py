"""When a broker log start is a DeleteRecords bound, the published object's format, and the plan
cut at the log start that every face reads through.

The end-to-end behaviour is tested against a real broker in tests/fetcher_e2e/test_log_start.py;
these pin the rule for the cases that broker run cannot produce on demand (another leader's
retention propagated to a replica, retention past a copy gap) and the object's failure modes.
"""

from __future__ import annotations

import json
import pickle

import pytest

from fetcher.log_start import bounded_plan
from fetcher.planning import PartitionPlan, plan_partition
from rlm.errors import OffsetOutOfRangeError, RemoteStorageIntegrityError
from rlm.log.log_start import deletion_bound
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
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


def _plan_with_gap() -> PartitionPlan:
    """Remote segments 0..999, 1000..1999, (gap 2000..2499), 2500..2999 on epoch 0."""
    tp = TopicIdPartition(KafkaUuid.random(), "orders", 0)
    segs = [
        RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), lo, hi, 1_700_000_000_000, 0,
                                 1_700_000_000_001, 1000, ((0, lo),),
                                 RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        for lo, hi in ((0, 999), (1000, 1999), (2500, 2999))
    ]
    return plan_partition(tp, segs)


def test_bounded_plan_cuts_below_the_log_start() -> None:
    plan = _plan_with_gap()
    assert (plan.log_start, plan.log_end, plan.gaps) == (0, 3000, ((2000, 2499),))
    cut = bounded_plan(plan, 1137)
    assert (cut.log_start, cut.log_end, cut.gaps) == (1137, 3000, ((2000, 2499),))
    assert [(s.first, s.last) for s in cut.segments] == [(1137, 1999), (2500, 2999)]
    with pytest.raises(OffsetOutOfRangeError) as e:
        cut.index_of(1136)
    assert (e.value.log_start, e.value.log_end) == (1137, 3000)
    assert cut.segment_for(1137).metadata.start_offset == 1000  # read from inside the segment
    shipped = pickle.loads(pickle.dumps(cut))  # Spark ships plans to executors
    assert (shipped.log_start, shipped.segments) == (cut.log_start, cut.segments)
    inside_gap = bounded_plan(plan, 2100)  # the gap below the new start is no gap any more
    assert (inside_gap.log_start, inside_gap.gaps) == (2500, ())
    assert bounded_plan(plan, 0) is plan


def test_bounded_plan_past_every_segment_is_empty_at_the_bound() -> None:
    """Everything remote was deleted: the range is [bound, bound), not [0, 0)."""
    cut = bounded_plan(_plan_with_gap(), 4000)
    assert (cut.segments, cut.log_start, cut.log_end) == ((), 4000, 4000)
    with pytest.raises(OffsetOutOfRangeError) as e:
        cut.index_of(2500)
    assert (e.value.log_start, e.value.log_end) == (4000, 4000)
