"""Lineage planning from remote metadata alone: duplicates, unclean elections, gaps, fencing."""

from __future__ import annotations

import pytest

from fetcher.planning import plan_partition
from rlm.errors import FencedLeaderEpochError, OffsetOutOfRangeError, UnknownLeaderEpochError
from rlm.lineage import lineage_from_segments
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)
FIN = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def seg(start: int, end: int, epochs: list[tuple[int, int]],
        state: RemoteLogSegmentState = FIN) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TP), start, end, 0, 1, 0, 100,
                                    tuple(epochs), state)


def chain(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[int, int, int]]:
    plan = plan_partition(TP, segments)
    return [(segments.index(p.metadata), p.first, p.last) for p in plan.segments]


def test_simple_chain_ignores_unfinished_copies() -> None:
    started = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    s = [seg(0, 99, [(0, 0)]), seg(100, 199, [(0, 100)]), seg(200, 299, [(0, 200)], started)]
    assert chain(s) == [(0, 0, 99), (1, 100, 199)]
    plan = plan_partition(TP, s)
    assert (plan.log_start, plan.log_end, plan.gaps) == (0, 200, ())


def test_duplicate_copies_of_one_range_are_read_once() -> None:
    s = [seg(0, 99, [(0, 0)]), seg(0, 99, [(0, 0)]), seg(100, 199, [(0, 100)])]
    c = chain(s)
    assert [x[1:] for x in c] == [(0, 99), (100, 199)]


def test_unclean_election_cuts_the_diverged_tail() -> None:
    # old leader: epoch 5 from 100 up to 200; new leader (unclean) truncated at 150, epoch 6 from 150
    old = seg(100, 200, [(5, 100)])
    new_a = seg(100, 149, [(5, 100)])
    new_b = seg(150, 250, [(6, 150)])
    assert lineage_from_segments([old, new_a, new_b]) == [(5, 100), (6, 150)]
    c = chain([old, new_a, new_b])
    assert [x[1:] for x in c] == [(100, 149), (150, 250)]
    assert 2 in [x[0] for x in c]  # offsets >= 150 come from the new leader's segment only


def test_segment_starting_with_a_stale_epoch_is_skipped() -> None:
    stale = seg(150, 190, [(5, 150)])  # epoch 5 ran past 149 only on the old leader
    good = [seg(100, 149, [(5, 100)]), seg(150, 250, [(6, 150)])]
    c = chain([*good, stale])
    assert [x[0] for x in c] == [0, 1]


def test_gap_and_ranges() -> None:
    s = [seg(0, 99, [(0, 0)]), seg(200, 299, [(0, 200)])]
    plan = plan_partition(TP, s)
    assert plan.gaps == ((100, 199),)
    assert plan.segment_for(150).first == 200
    with pytest.raises(OffsetOutOfRangeError) as e:
        plan.segment_for(300)
    assert (e.value.log_start, e.value.log_end) == (0, 300)


def test_epoch_checks() -> None:
    plan = plan_partition(TP, [seg(0, 99, [(0, 0), (2, 50)]), seg(100, 199, [(2, 100), (3, 150)])])
    assert plan.lineage == ((0, 0), (2, 50), (3, 150))
    assert plan.epoch_for_offset(120) == 2
    plan.check_leader_epoch(0, 50)
    with pytest.raises(FencedLeaderEpochError):
        plan.check_leader_epoch(0, 51)
    plan.check_leader_epoch(1, 50)  # unknown middle epoch: the largest epoch <= it (0) decides
    plan.check_leader_epoch(3, 199)
    with pytest.raises(UnknownLeaderEpochError):
        plan.check_leader_epoch(4, 10)


def test_empty_partition() -> None:
    plan = plan_partition(TP, [])
    assert (plan.log_start, plan.log_end, plan.segments) == (0, 0, ())
    with pytest.raises(OffsetOutOfRangeError):
        plan.segment_for(0)
