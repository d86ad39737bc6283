"""A lone dirty remote segment is compacted in place (``rlm.daemon.remote_compaction_lone``).

Before: ranges merged at least two segments, so the only tiered segment of a quiet partition
(superseded updates, tombstones) waited for a next tiered segment that never came. Now its
output keeps the same range and wins because it finished later (``rlm.lineage.finished_later``,
Kafka's ``RemoteLogMetadataCache`` rule); the input is ``replaced`` when the sizes differ.

Without a broker: the rule (readers read the later copy of one range, each offset once, the
input is replaced, an exact duplicate is still kept) and the job's choices (the clock margin, no
same-size output, no compacting an unchanged lone segment again). Beside the real broker: a
``compact,delete`` partition whose history is one tiered segment is compacted by the daemon —
same range, new segment, smaller, the input's objects deleted, every key's latest value read
once per offset (``rlm fetch`` + broker), ``rlm verify --deep`` clean, a rebuild from the bucket
equal, nothing due afterwards — and the same with the daemon killed right after the output's
COPY_SEGMENT_FINISHED (both copies FINISHED: readers read the output, a restart converges).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from rlm.compaction import CompactionResult, CompactionSettings
from rlm.daemon.remote_compaction import plan_range
from rlm.daemon.remote_compaction_lone import LONE_MARGIN_MS, LoneSegments
from rlm.lineage import chain, finished_later, judge_segments, lineage_from_segments, replaced_by
from rlm.log.partition import PartitionDir
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.compacted.helpers import Written, key, set_topic_config, update_keys
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING, _raw_config, _roll
from tests.compacted.test_replacement import (
    COMMON,
    assert_one_chain,
    check_reads,
    finished_of,
    rebuilt_segments,
    tier_once,
)
from tests.daemon.helpers import create_topic, wait_for
from tests.faults.proc_helpers import (
    all_segments,
    events,
    read_status_file,
    run_once,
    stored_segment_ids,
    verify,
)

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)


def seg(start: int, end: int, size: int = 1000, finished: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TP), start_offset=start, end_offset=end,
        max_timestamp_ms=0, broker_id=0, event_timestamp_ms=finished, segment_size_in_bytes=size,
        segment_leader_epochs=((0, start),), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def read(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[RemoteLogSegmentMetadata, int, int]]:
    links, gaps = chain(segments, lineage_from_segments(segments))
    assert not gaps
    return links


# ---- the rule ------------------------------------------------------------------------------------


def test_the_later_copy_of_a_range_is_read_and_replaces_the_earlier() -> None:
    lone, later = seg(0, 99, size=1000, finished=10), seg(100, 199, finished=11)
    out = seg(0, 99, size=600, finished=5000)
    for order in ([lone, out, later], [out, later, lone], [later, lone, out]):  # ids and order never matter
        links = read(order)
        assert [m for m, _, _ in links] == [out, later], "the compacted copy, each offset once"
        assert [o for _, a, b in links for o in range(a, b + 1)] == list(range(200))
        verdict = judge_segments(order, lineage_from_segments(order))
        assert [(o, by) for o, by in verdict.replaced] == [(lone, out)]
        assert set(verdict.kept) == {out, later} and not verdict.off_lineage
    assert finished_later(out, lone) and not finished_later(lone, out)
    assert replaced_by(out, read([lone, out])) is None, "the output is read: never replaced"


def test_a_larger_later_copy_replaces_too_but_an_exact_duplicate_stays_kept() -> None:
    lone = seg(0, 99, size=1000, finished=10)
    stamped = seg(0, 99, size=1012, finished=5000)  # tombstones given their delete horizon: larger
    assert [m for m, _, _ in read([lone, stamped])] == [stamped]
    assert judge_segments([lone, stamped], lineage_from_segments([lone])).replaced == ((lone, stamped),)
    # the copier's duplicate: same range and bytes, whatever its time: kept and unread, as before
    dup = seg(0, 99, size=1000, finished=5000)
    verdict = judge_segments([lone, dup], lineage_from_segments([lone]))
    assert not verdict.replaced and set(verdict.kept) == {lone, dup}
    assert [m for m, _, _ in read([lone, dup])] == [dup], "the later copy is the one read"
    # the same time: the first of equals by id, as before (no replacement)
    same_time = seg(0, 99, size=600, finished=10)
    verdict = judge_segments([lone, same_time], lineage_from_segments([lone]))
    assert not verdict.replaced and len(read([lone, same_time])) == 1


def test_a_lone_segment_is_a_range_once_the_clock_is_past_its_finish_by_the_margin() -> None:
    lone = seg(0, 99, finished=1_000_000)
    links = read([lone])
    due = CompactionSettings(min_cleanable_dirty_ratio=0.5)
    assert plan_range(links, 0, due, now=1_000_000 + LONE_MARGIN_MS - 1) is None, "finished just now"
    plan = plan_range(links, 0, due, now=1_000_000 + LONE_MARGIN_MS)
    assert plan is not None and plan.inputs == (lone,) and plan.later == ()
    assert plan_range(links, 100, due, now=10**12) is None, "compacted already (clean end past it)"
    # a lone first segment followed by a gap is a range of one too; the later ones are 'later'
    after_gap = seg(150, 199, finished=1)
    links = chain([lone, after_gap], lineage_from_segments([lone, after_gap]))[0]
    plan = plan_range(links, 0, due, now=10**12)
    assert plan is not None and plan.inputs == (lone,) and plan.later == (after_gap,)


def _result(read_: int, kept: int, size: int, reframed: int = 0) -> CompactionResult:
    return CompactionResult(base_offset=0, end_offset=100, segments_used=1, records_read=read_,
                            records_kept=kept, batches_reframed=reframed, bytes_out=size)


def test_the_job_publishes_a_lone_output_only_when_readers_can_tell_it_apart() -> None:
    lone = seg(0, 99, size=1000, finished=0)
    now = LONE_MARGIN_MS
    memo = LoneSegments()
    assert not memo.publishes(TP, lone, _result(50, 30, 600), now - 1), "the clock margin first"
    assert not memo.skip(TP, (lone,)), "a margin miss is retried"
    assert not memo.publishes(TP, lone, _result(50, 50, 1000), now), "nothing removed: nothing published"
    assert memo.skip(TP, (lone,)), "... and not compacted again while it is the lone segment"
    assert not memo.skip(TP, (lone, seg(100, 199))), "a range of two is a normal compaction"
    memo = LoneSegments()
    assert not memo.publishes(TP, lone, _result(50, 49, 1000, reframed=1), now), "same size: a duplicate"
    assert memo.skip(TP, (lone,))
    assert memo.publishes(TP, lone, _result(50, 30, 600), now)
    assert not memo.skip(TP, (lone,))


# ---- beside the real broker ----------------------------------------------------------------------


def _write(bootstrap: str, topic: str, written: Written) -> None:
    """Updates of 50 keys, three rounds, then tombstones of ten of them: ~0.25 MB, one segment."""
    for r in range(3):
        update_keys(bootstrap, topic, range(50), f"u{r}", written)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def acked(err: Any, msg: Any) -> None:
        assert err is None, err
        written.records[msg.offset()] = (msg.key(), msg.value())

    for k in range(10):
        p.produce(topic, key=key(k), value=None, partition=0, on_delivery=acked)
    assert p.flush(60) == 0


def one_tiered_segment(kafka: Any, topic: str, tmp: Path) -> tuple[Path, Written, TopicIdPartition,
                                                                    RemoteLogSegmentMetadata]:
    """A compact,delete topic whose remote history is one segment (the rest stays in the active one)."""
    create_topic(kafka.bootstrap, topic, **{"cleanup.policy": "compact,delete", **COMMON, **NO_CLEANING})
    written = Written()
    _write(kafka.bootstrap, topic, written)
    pdir = kafka.log_dir / f"{topic}-0"
    set_topic_config(kafka.bootstrap, topic, **NO_CLEANING, **{"segment.ms": "100"})
    _roll(kafka.bootstrap, topic, pdir, written)
    set_topic_config(kafka.bootstrap, topic, **NO_CLEANING, **{"segment.ms": "604800000"})
    cfg = tmp / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({**_raw_config(kafka, topic, tmp), "log_format": "json"}))
    tip = TopicIdPartition(PartitionDir(pdir).topic_id, topic, 0)
    assert tier_once(cfg)["compactions"] == 0, "min.compaction.lag.ms of an hour: nothing compacted"
    tiered = finished_of(all_segments(cfg, tip, tmp / "r0"))
    assert len(tiered) == 1, tiered
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    lone = tiered[0]
    wait_for("the lone segment finished LONE_MARGIN_MS ago",
             lambda: time.time() * 1000 >= lone.event_timestamp_ms + LONE_MARGIN_MS)
    return cfg, written, tip, lone


def check_compacted_in_place(cfg: Path, kafka: Any, topic: str, written: Written, tip: TopicIdPartition,
                             lone: RemoteLogSegmentMetadata, tmp: Path) -> RemoteLogSegmentMetadata:
    segs = all_segments(cfg, tip, tmp / "r1")
    assert len(segs) == 1 and segs[0].state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED, segs
    new = segs[0]
    assert (new.start_offset, new.end_offset) == (lone.start_offset, lone.end_offset), "the same range"
    assert new.remote_log_segment_id != lone.remote_log_segment_id
    assert new.segment_size_in_bytes < lone.segment_size_in_bytes, "superseded updates removed"
    assert new.event_timestamp_ms > lone.event_timestamp_ms
    assert stored_segment_ids(tmp / "remote") == {new.remote_log_segment_id.id.text}, "input objects deleted"
    remote = check_reads(cfg, kafka, topic, written, lone.end_offset + 1)
    assert len(remote) < lone.end_offset + 1 - lone.start_offset, "records were removed remotely"
    verify(cfg, topic)
    rebuilt = rebuilt_segments(cfg, tip, tmp)
    assert [m.remote_log_segment_id for m in finished_of(rebuilt)] == [new.remote_log_segment_id]
    assert_one_chain(rebuilt, lone.start_offset, lone.end_offset)
    return new


@pytest.mark.kafka
@pytest.mark.slow
def test_a_lone_dirty_segment_is_compacted_in_place(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    topic = unique_topic
    cfg, written, tip, lone = one_tiered_segment(kafka, topic, tmp_path)
    counted = tier_once(cfg)
    assert counted["compactions"] == 1 and counted["removed"] > 0, counted
    assert counted["before"] == lone.segment_size_in_bytes
    new = check_compacted_in_place(cfg, kafka, topic, written, tip, lone, tmp_path)
    status = read_status_file(tmp_path / "work")["partitions"][f"{topic}-0"]["compaction"]
    assert status["segments_replaced"] == 1 and status["end_offset"] == lone.end_offset
    assert tier_once(cfg)["compactions"] == 0, "nothing more due: the compacted segment is clean"
    assert [m.remote_log_segment_id for m in all_segments(cfg, tip, tmp_path / "r2")] == \
        [new.remote_log_segment_id]


@pytest.mark.kafka
@pytest.mark.slow
def test_killed_after_the_output_finished_readers_read_it_and_a_restart_converges(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    topic = unique_topic
    cfg, written, tip, lone = one_tiered_segment(kafka, topic, tmp_path)
    crashed = run_once(cfg, RLM_TEST_CRASH_AT="compaction_after_new_finished")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert not list(events(crashed.stderr, "remote_compaction_replaced")), "killed before the end"
    both = finished_of(all_segments(cfg, tip, tmp_path / "rc"))
    assert len(both) == 2 and {(m.start_offset, m.end_offset) for m in both} == {(0, lone.end_offset)}
    new = next(m for m in both if m.remote_log_segment_id != lone.remote_log_segment_id)
    assert [m for m, _, _ in read(both)] == [new], "readers read the output, not the input"
    check_reads(cfg, kafka, topic, written, lone.end_offset + 1)  # each offset once, from the output
    noted = verify(cfg, topic)["partitions"][0]["replaced"]
    assert [n["segment_id"] for n in noted] == [lone.remote_log_segment_id.id.text], noted
    rebuilt = rebuilt_segments(cfg, tip, tmp_path)
    assert [m.remote_log_segment_id for m in finished_of(rebuilt)] == [new.remote_log_segment_id], \
        "a rebuild restores the output only"

    restarted = run_once(cfg)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert check_compacted_in_place(cfg, kafka, topic, written, tip, lone, tmp_path) == new
