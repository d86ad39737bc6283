"""A running remote compaction's progress in ``rlm status`` and the metrics, beside the real broker.

The daemon runs in this process; the engine's progress callback (the one the job wires into
:class:`rlm.daemon.compaction_progress.RunningCompaction`) is wrapped to look at the daemon
*while* the compaction runs: the status file read by ``rlm status --json`` and the table, and
the metrics, show the range, the phase, records done of total and the offset-map passes. A first
run fails mid-compaction (an error raised from the callback, as a broken input would raise from
the engine): the record, the gauges and the memory reservation are gone afterwards and the
failure is counted. A second run compacts: while it runs the same is shown, afterwards only the
finished replacement remains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm.compaction import CompactionError, CompactionResult
from rlm.config import load_config
from rlm.daemon.compaction_progress import RunningCompaction
from rlm.daemon.service import Daemon
from tests.compacted.helpers import set_topic_config
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import finished_of, setup_topic, tier_once
from tests.faults.proc_helpers import all_segments, read_status_file, rlm

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
RUNNING_GAUGES = ("rlm_remote_compaction_running_records", "rlm_remote_compaction_running_input_records",
                  "rlm_remote_compaction_running_input_bytes", "rlm_remote_compaction_running_passes",
                  "rlm_remote_compaction_running_started_seconds")


def gauge(text: str, name: str, topic: str) -> float | None:
    """The value of ``name{partition="0",topic=topic}`` in a metrics exposition, None if absent."""
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


class Watch:
    """What the daemon showed at the engine's first progress callback (after the first pass)."""

    def __init__(self, daemon: Daemon, cfg: Path, topic: str, fail: bool) -> None:
        self.daemon, self.cfg, self.topic, self.fail = daemon, cfg, topic, fail
        self.status_json: dict[str, Any] | None = None
        self.table = ""
        self.metrics = ""
        self.calls: list[tuple[str, int, int, int]] = []

    def __call__(self, run: RunningCompaction, result: CompactionResult) -> None:
        self.calls.append((result.phase, result.records_mapped, result.records_read, result.passes))
        if self.status_json is None:
            self.daemon.ctx.status.flush()  # what the daemon's periodic flush writes
            shown = rlm("status", "--json", "--config", str(self.cfg))
            self.status_json = json.loads(shown.stdout)["partitions"][f"{self.topic}-0"]
            self.table = rlm("status", "--config", str(self.cfg)).stdout
            self.metrics = self.daemon.metrics.render().decode()
            if self.fail:
                raise CompactionError("injected: the input went bad mid-compaction")


def run_watched(cfg: Path, topic: str, monkeypatch: pytest.MonkeyPatch, *,
                fail: bool) -> tuple[Watch, Daemon]:
    d = Daemon(load_config(cfg), once=True).start()
    watch = Watch(d, cfg, topic, fail)
    engine = RunningCompaction.engine

    def watched(self: RunningCompaction, result: CompactionResult) -> None:
        engine(self, result)
        watch(self, result)

    monkeypatch.setattr(RunningCompaction, "engine", watched)
    try:
        assert d.run_once() == 0
    finally:
        d.stop()
        monkeypatch.setattr(RunningCompaction, "engine", engine)
    return watch, d


def check_shown_while_running(watch: Watch, topic: str, first: int, last: int, segments: int,
                              input_bytes: int) -> None:
    r = watch.status_json and watch.status_json["compaction_running"]
    assert r, watch.status_json
    assert (r["start_offset"], r["end_offset"], r["segments"], r["input_bytes"]) == (first, last, segments,
                                                                                   input_bytes)
    assert r["phase"] == "map" and r["passes"] == 1
    assert 0 < r["records_done"] <= r["records_total"], r
    assert r["offset_map_bytes"] > 0 and r["newer_keys_bytes"] > 0 and r["started_ms"] > 0
    assert (f"compacting {topic}-0: [{first}, {last + 1}) from {segments} segments ({input_bytes} bytes), "
            f"map, {r['records_done']}/{r['records_total']} records mapped, 1 passes done") in watch.table, \
        watch.table
    assert gauge(watch.metrics, "rlm_remote_compaction_running_input_records", topic) == r["records_total"]
    assert gauge(watch.metrics, "rlm_remote_compaction_running_records", topic) == r["records_done"]
    assert gauge(watch.metrics, "rlm_remote_compaction_running_input_bytes", topic) == input_bytes
    assert gauge(watch.metrics, "rlm_remote_compaction_running_passes", topic) == 1
    reserved = [line for line in watch.metrics.splitlines()
                if line.startswith("rlm_remote_compaction_memory_reserved_bytes ")]
    assert reserved and float(reserved[0].split()[1]) == r["offset_map_bytes"] + r["newer_keys_bytes"]


def check_cleared(d: Daemon, work: Path, topic: str) -> None:
    metrics = d.metrics.render().decode()
    assert all(gauge(metrics, name, topic) is None for name in RUNNING_GAUGES), "running gauges removed"
    assert "rlm_remote_compaction_memory_reserved_bytes 0.0" in metrics
    assert d.compactor.budget.used == 0
    assert read_status_file(work)["partitions"][f"{topic}-0"]["compaction_running"] is None


def test_progress_is_shown_while_running_and_cleared_after_error_and_success(
    kafka: Any, unique_topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique_topic
    cfg, _written, tip = setup_topic(kafka, topic, tmp_path)
    tier_once(cfg)  # tiered; min.compaction.lag.ms of an hour: nothing compacted
    before = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    size = sum(m.segment_size_in_bytes for m in before)
    work = tmp_path / "work"

    failed, d = run_watched(cfg, topic, monkeypatch, fail=True)
    check_shown_while_running(failed, topic, 0, before[-1].end_offset, len(before), size)
    assert failed.calls[-1][0] == "map", "the compaction stopped at the injected error"
    assert 'rlm_errors_total{kind="CompactionError",task="compaction"} 1.0' in d.metrics.render().decode()
    check_cleared(d, work, topic)
    status = read_status_file(work)["partitions"][f"{topic}-0"]
    assert status["compaction"] is None, "nothing was replaced"
    assert [m.remote_log_segment_id for m in finished_of(all_segments(cfg, tip, tmp_path / "r1"))] == \
        [m.remote_log_segment_id for m in before]

    done, d = run_watched(cfg, topic, monkeypatch, fail=False)
    check_shown_while_running(done, topic, 0, before[-1].end_offset, len(before), size)
    phases = [c[0] for c in done.calls]
    assert phases[0] == "map" and phases[-2:] == ["write", "done"], phases
    assert done.calls[-1][1] == done.calls[-1][2], "at the end every record was mapped"
    check_cleared(d, work, topic)
    status = read_status_file(work)["partitions"][f"{topic}-0"]
    assert status["compaction"]["segments_replaced"] == len(before)
    assert "compacting" not in rlm("status", "--config", str(cfg)).stdout
