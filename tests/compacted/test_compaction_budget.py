"""The daemon-wide memory cap of remote compaction (``remote_compaction_memory_bytes``).

Without a broker: the budget's arithmetic (a lone job gets what it wants, concurrent jobs never
hold more than the cap together, each finds at least the floor, more jobs than slots wait).
Beside the real broker: two ``compact,delete`` topics compacted at the same time on the daemon's
two task threads under a 64 KiB cap — the reservations are instrumented (held together, never
above the cap), the second job's offset map is too small for the workload's keys so the engine
runs several passes, and both compacted histories still read back correctly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.compaction import BYTES_PER_SLOT, CompactionResult
from rlm.config import load_config
from rlm.daemon.compaction_budget import MIN_GRANT, CompactionBudget, Grant
from rlm.daemon.compaction_progress import RunningCompaction
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.compacted.helpers import KEYS, set_topic_config, write_workload
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING, _raw_config
from tests.compacted.test_replacement import COMMON, assert_one_chain, check_reads, finished_of
from tests.daemon.helpers import create_topic
from tests.faults.proc_helpers import all_segments

MiB = 1024 * 1024


def test_a_lone_job_gets_what_it_wants() -> None:
    budget = CompactionBudget(256 * MiB, slots=10)
    with budget.reserve(128 * MiB, 64 * MiB) as grant:
        assert grant == Grant(128 * MiB, 64 * MiB)
        assert budget.used == 192 * MiB
    assert budget.used == 0, "released when the job ends"


def test_concurrent_jobs_share_the_cap_and_each_finds_the_floor() -> None:
    cap, slots = 256 * MiB, 4
    budget = CompactionBudget(cap, slots)
    grants: list[Grant] = []
    with budget.reserve(128 * MiB, 64 * MiB) as a, budget.reserve(128 * MiB, 64 * MiB) as b, \
            budget.reserve(128 * MiB, 64 * MiB) as c, budget.reserve(128 * MiB, 64 * MiB) as d:
        grants = [g for g in (a, b, c, d) if g is not None]
        assert len(grants) == 4 and budget.used <= cap
        assert all(g.total >= budget.floor for g in grants)
        assert grants[0].total == 192 * MiB, "the first takes what it wants: the floors stay free"
        # the split keeps the wanted ratio (2:1), so a smaller map still has its newer-keys set
        assert all(abs(g.offset_map_bytes - 2 * g.newer_keys_bytes) <= 2 for g in grants)
        with budget.reserve(128 * MiB, 64 * MiB) as extra:  # more jobs than slots: what is left, or none
            assert extra is None or budget.used <= cap
    assert budget.used == 0 and budget.peak_bytes <= cap and budget.peak_jobs >= 4


def test_nothing_left_means_the_job_waits() -> None:
    budget = CompactionBudget(MIN_GRANT * 2, slots=1)
    with budget.reserve(MIN_GRANT * 2, 0) as first, budget.reserve(100, 100) as second:
        assert first is not None and first.total == MIN_GRANT * 2
        assert second is None, "not even MIN_GRANT left: this run waits"
    assert budget.used == 0


def test_threads_never_hold_more_than_the_cap() -> None:
    """Many threads reserving and releasing at once: the peak stays under the cap."""
    budget = CompactionBudget(10 * MiB, slots=8)
    start = threading.Barrier(8)
    refused = 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal refused
        start.wait(timeout=30)
        for _ in range(200):
            with budget.reserve(3 * MiB, MiB) as g:
                if g is None:
                    with lock:
                        refused += 1
                else:
                    assert budget.used <= budget.cap

    threads = [threading.Thread(target=job) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert budget.used == 0 and budget.peak_bytes <= budget.cap
    assert refused == 0, "never more jobs than slots: every one found at least the floor"


class RecordingBudget(CompactionBudget):
    """The daemon's budget, instrumented: every grant and what was held after it; the two jobs wait
    for each other once they hold their reservations, so they provably hold them at the same time."""

    def __init__(self, cap_bytes: int, slots: int) -> None:
        super().__init__(cap_bytes, slots)
        self.both = threading.Barrier(2, timeout=120)
        self.grants: list[Grant | None] = []
        self.held: list[int] = []

    @contextmanager
    def reserve(self, offset_map: int, newer_keys: int) -> Iterator[Grant | None]:
        with super().reserve(offset_map, newer_keys) as grant:
            self.grants.append(grant)
            self.held.append(self.used)
            if grant is not None:
                self.both.wait()
            yield grant



@pytest.mark.kafka
@pytest.mark.slow
def test_two_partitions_compact_at_once_under_a_small_cap(
    kafka: Any, unique_topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = [f"{unique_topic}-a", f"{unique_topic}-b"]
    written = {}
    for t in topics:
        create_topic(kafka.bootstrap, t, **{"cleanup.policy": "compact,delete", **COMMON, **NO_CLEANING})
        written[t] = write_workload(kafka.bootstrap, t, rounds=4)
    cap = 64 * 1024
    raw = {**_raw_config(kafka, topics[0], tmp_path), "log_format": "json", "thread_pool_size": 2,
           "remote_compaction_memory_bytes": cap,
           "topics": [{"pattern": t, "remote.storage.enable": True} for t in topics]}
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    tips = {t: TopicIdPartition(PartitionDir(kafka.log_dir / f"{t}-0").topic_id, t, 0) for t in topics}

    d = Daemon(load_config(cfg), once=True).start()
    try:
        assert d.run_once() == 0  # tiered; min.compaction.lag.ms of an hour: nothing compacted
    finally:
        d.stop()
    before = {t: finished_of(all_segments(cfg, tips[t], tmp_path / f"r0-{t}")) for t in topics}
    assert all(len(b) >= 2 for b in before.values()), before
    for t in topics:
        set_topic_config(kafka.bootstrap, t, **CLEANING)

    passes: dict[str, int] = {}
    engine = RunningCompaction.engine

    def counting(self: RunningCompaction, result: CompactionResult) -> None:
        passes[self._tp.topic] = max(passes.get(self._tp.topic, 0), result.passes)
        engine(self, result)

    monkeypatch.setattr(RunningCompaction, "engine", counting)
    d = Daemon(load_config(cfg), once=True).start()
    budget = RecordingBudget(cap, 2)
    d.compactor.budget = budget
    try:
        assert d.run_once() == 0
        compactions = d.metrics.total(d.metrics.compactions)
    finally:
        d.stop()

    grants = [g for g in budget.grants if g is not None]
    assert len(grants) == 2 and compactions == 2, (budget.grants, compactions)
    assert budget.peak_jobs == 2, "both compactions held their reservations at once"
    assert budget.peak_bytes <= cap and max(budget.held) <= cap and sum(g.total for g in grants) <= cap
    small = min(grants, key=lambda g: g.offset_map_bytes)
    assert small.offset_map_bytes // BYTES_PER_SLOT * 0.9 < KEYS, "the second map cannot hold every key"
    assert max(passes.values()) > 1, f"a smaller offset map means more passes: {passes}"
    for t in topics:
        segs = finished_of(all_segments(cfg, tips[t], tmp_path / f"r1-{t}"))
        assert segs[0].start_offset == 0 and len(segs) < len(before[t]), "compacted"
        assert_one_chain(segs, 0, before[t][-1].end_offset)
        check_reads(cfg, kafka, t, written[t], before[t][-1].end_offset + 1)
