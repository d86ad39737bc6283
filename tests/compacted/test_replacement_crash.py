"""kill -9 at every step of a remote compaction's replacement, then a restart converges.

The daemon (``rlm run --once`` as a subprocess) tiers the workload, then runs again with
compaction allowed and ``RLM_TEST_CRASH_AT`` naming one step: the replacement's own
(``rlm.daemon.crash.REPLACE_STEPS``), the new segment's copy steps or the inputs' delete steps.
In the state the crash left, the read core reads every offset once (even with the new segment
and its inputs all FINISHED) and a rebuild from the bucket restores no replaced segment. After
a restart: everything FINISHED, one gapless chain with the compacted segment first and no
replaced segment left, no orphan object, every key's latest value read once per offset, and a
rebuild from the bucket gives the same segments.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from rlm.daemon.crash import COPY_STEPS, DELETE_STEPS, REPLACE_STEPS
from tests.compacted.helpers import set_topic_config
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import (
    S,
    assert_one_chain,
    check_reads,
    finished_of,
    rebuilt_segments,
    setup_topic,
)
from tests.faults.proc_helpers import all_segments, events, run_once, stored_segment_ids, verify

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.parametrize("step", REPLACE_STEPS + COPY_STEPS + DELETE_STEPS)
def test_kill_at_each_replacement_step_converges(
    kafka: Any, unique_topic: str, tmp_path: Path, step: str
) -> None:
    topic = unique_topic
    cfg, written, tip = setup_topic(kafka, topic, tmp_path)
    first = run_once(cfg)
    assert first.returncode == 0, first.stderr[-3000:]
    before = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    assert len(before) >= 2
    last = before[-1].end_offset

    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    crashed = run_once(cfg, RLM_TEST_CRASH_AT=step)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert not list(events(crashed.stderr, "remote_compaction_replaced")), "killed before the end"
    check_reads(cfg, kafka, topic, written, last + 1)  # once per offset, whatever is FINISHED
    old_ids = {m.remote_log_segment_id for m in before}
    fin = finished_of(all_segments(cfg, tip, tmp_path / "rc"))
    new_end = max((m.end_offset for m in fin if m.remote_log_segment_id not in old_ids), default=-1)
    inputs_left = {m.remote_log_segment_id.id.text for m in fin
                   if m.remote_log_segment_id in old_ids and m.end_offset <= new_end}
    noted = verify(cfg, topic)["partitions"][0]["replaced"]  # listed by verify, not a problem
    assert {p["segment_id"] for p in noted} == inputs_left
    if step in ("after_copy_finished", "compaction_after_new_finished"):
        assert len(inputs_left) >= 2, "the new segment and all its inputs FINISHED"
    assert_one_chain(rebuilt_segments(cfg, tip, tmp_path), 0, last)

    restarted = run_once(cfg)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    segs = all_segments(cfg, tip, tmp_path / "r1")
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in segs), [(m.state, m.start_offset) for m in segs]
    assert_one_chain(segs, 0, last)
    new = segs[0]
    assert new.remote_log_segment_id not in old_ids and new.start_offset == 0
    assert len([m for m in before if m.end_offset <= new.end_offset]) >= 2, "the inputs were replaced"
    assert {m.remote_log_segment_id for m in segs[1:]} <= old_ids, "one compacted segment, the rest untouched"
    assert stored_segment_ids(tmp_path / "remote") == {m.remote_log_segment_id.id.text for m in segs}, \
        "no orphan object (an undone copy or a replaced input)"
    remote = check_reads(cfg, kafka, topic, written, last + 1)
    assert len(remote) < sum(1 for o in written.records if o <= last and o not in written.aborted)
    rebuilt = finished_of(rebuilt_segments(cfg, tip, tmp_path))
    assert [m.remote_log_segment_id for m in rebuilt] == [m.remote_log_segment_id for m in segs]
