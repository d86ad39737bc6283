"""The replacement rule (:func:`rlm.lineage.replaced_by`) and the job's range choice, without a broker.

A compacted segment keeps its first input's start and its last input's end; while it and its
inputs are all FINISHED (a crash between the copy and the deletes) every reader's chain reads it
and none of the inputs, each offset once; the inputs are ``replaced`` (not kept: retention does
not count them, rebuild does not restore them; not off the lineage: no quarantine). An exact
duplicate is not a replacement. :func:`rlm.daemon.remote_compaction.plan_range` takes whole
consecutive links from the start, two at least, when the dirty ratio says so.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlm.compaction import CompactionSettings
from rlm.config import ResolvedTopicConfig
from rlm.daemon.remote_compaction import InvalidCompactionSettings, plan_range, settings_for
from rlm.lineage import chain, judge_segments, lineage_from_segments
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)


def seg(start: int, end: int, size: int = 1000, epochs: tuple[tuple[int, int], ...] | None = None,
        ts: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TP),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=ts,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs or ((0, start),),
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def offsets_read(segments: list[RemoteLogSegmentMetadata]) -> list[int]:
    links, gaps = chain(segments, lineage_from_segments(segments))
    assert not gaps
    return [o for _, a, b in links for o in range(a, b + 1)]


def test_compacted_segment_wins_over_its_finished_inputs() -> None:
    a, b, c, later = seg(0, 99), seg(100, 199), seg(200, 299), seg(300, 399)
    new = seg(0, 299, size=900)
    for order in ([a, b, c, new, later], [new, later, c, b, a]):  # listing order never matters
        links, _ = chain(order, lineage_from_segments(order))
        assert [m for m, _, _ in links] == [new, later]
        assert offsets_read(order) == list(range(400)), "every offset once"
        verdict = judge_segments(order, lineage_from_segments(order))
        assert {(o.remote_log_segment_id, by.remote_log_segment_id) for o, by in verdict.replaced} == {
            (m.remote_log_segment_id, new.remote_log_segment_id) for m in (a, b, c)
        }
        assert set(verdict.kept) == {new, later} and not verdict.off_lineage
    # some inputs already deleted (a crash between two deletes): the same
    verdict = judge_segments([c, new, later], lineage_from_segments([c, new, later]))
    assert [o for o, _ in verdict.replaced] == [c]


def test_exact_duplicate_is_kept_not_replaced() -> None:
    a, dup, b = seg(0, 99), seg(0, 99), seg(100, 199)
    verdict = judge_segments([a, dup, b], lineage_from_segments([a, dup, b]))
    assert not verdict.replaced and set(verdict.kept) == {a, dup, b}
    assert offsets_read([a, dup, b]) == list(range(200))


def test_a_segment_off_the_lineage_is_not_a_replacement() -> None:
    """A deposed leader's segment under a larger one is quarantined as before, never 'replaced'."""
    good = seg(0, 199, epochs=((0, 0), (2, 150)))
    deposed = seg(100, 180, epochs=((0, 100), (1, 150)))
    lineage = lineage_from_segments([good])
    verdict = judge_segments([good, deposed], lineage)
    assert verdict.off_lineage == (deposed,) and not verdict.replaced


def test_plan_range_takes_whole_consecutive_links_when_due() -> None:
    a, b, c = seg(0, 99), seg(100, 199), seg(200, 299)
    links = chain([a, b, c], lineage_from_segments([a, b, c]))[0]
    due = CompactionSettings(min_cleanable_dirty_ratio=0.5)
    plan = plan_range(links, 0, due, now=0)
    assert plan is not None and plan.inputs == (a, b, c) and plan.dirty_bytes == plan.total_bytes == 3000
    # the first two were compacted before (checkpoint at 200): 1000 / 3000 dirty is not > 0.5
    assert plan_range(links, 200, due, now=0) is None
    assert plan_range(links, 200, CompactionSettings(min_cleanable_dirty_ratio=0.3), now=0) is not None
    # max.compaction.lag.ms makes old dirty data due whatever the ratio
    lagging = CompactionSettings(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=10)
    assert plan_range(links, 200, lagging, now=1000) is not None
    # a single segment that finished a moment ago is not a range yet (tests/compacted/test_lone_segment.py)
    assert plan_range(links[:1], 0, due, now=0) is None
    # a byte cap stops the range; a gap stops it too
    capped = plan_range(links, 0, due, now=0, max_bytes=2000)
    assert capped is not None and capped.inputs == (a, b) and capped.later == (c,)
    gap = chain([a, c], lineage_from_segments([a, c]))[0]
    assert plan_range(gap, 0, due, now=0) is None


def test_bad_compaction_config_is_a_typed_error_naming_it() -> None:
    base: dict[str, Any] = {"remote_storage_enable": True, "retention_ms": -1, "retention_bytes": -1,
                            "local_retention_ms": -1, "local_retention_bytes": -1,
                            "cleanup_policy": "compact,delete"}
    good = ResolvedTopicConfig(**base, compaction_configs=(("min.cleanable.dirty.ratio", "0.2"),))
    assert settings_for("t", good).min_cleanable_dirty_ratio == 0.2
    assert settings_for("t", ResolvedTopicConfig(**base)) == CompactionSettings()  # Kafka's defaults
    bad = ResolvedTopicConfig(**base, compaction_configs=(("min.cleanable.dirty.ratio", "lots"),
                                                           ("max.compaction.lag.ms", "0")))
    with pytest.raises(InvalidCompactionSettings) as err:
        settings_for("orders", bad)
    assert "topic orders" in str(err.value) and "min.cleanable.dirty.ratio='lots'" in str(err.value)
    assert "max.compaction.lag.ms" in str(err.value)
