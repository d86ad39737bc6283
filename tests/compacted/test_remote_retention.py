"""Remote retention by cleanup policy, with the standalone daemon on written files a day old:
a ``compact`` topic keeps its tiered history whatever ``retention.ms`` says (only compaction
replaces it, as the broker never deletes a compacted log by age), a ``compact,delete`` topic
loses it to retention as a delete topic does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, MetaProperties
from rlm.log.writer import PartitionWriter, WriterConfig, merge_offset_checkpoint, write_log_dir_files
from rlm.types import KafkaUuid, TopicPartition

DAY_MS = 24 * 3600 * 1000


def _write(log_dir: Path, topic: str) -> None:
    old = int(time.time() * 1000) - DAY_MS
    w = PartitionWriter(log_dir / f"{topic}-0", topic_id=KafkaUuid.random(), config=WriterConfig(),
                        clock=lambda: old)
    for i in range(40):
        if i % 10 == 0 and i:
            w.roll()
        w.append([(f"k{j}".encode(), b"v" * 50) for j in range(10)], producer_id=3, producer_epoch=0)
    w.close()
    tp = TopicPartition(topic, 0)
    write_log_dir_files(log_dir, [(tp, w.log_end_offset)], meta=MetaProperties(1, "retention-compact-01", 1))
    merge_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, {tp: 300})  # cleaned up to the active


@pytest.mark.parametrize(("policy", "kept"), [("compact", True), ("compact,delete", False)])
def test_remote_retention_by_cleanup_policy(tmp_path: Path, policy: str, kept: bool) -> None:
    topic = "state"
    _write(tmp_path / "logs", topic)
    cfg = load_config(
        None,
        log_dirs=[str(tmp_path / "logs")],
        work_dir=str(tmp_path / "work"),
        storage={"plugin": "local", "config": {"root": str(tmp_path / "remote")}},
        metadata={"manager": "file", "config": {"dir": str(tmp_path / "work" / "metadata")}},
        topics=[{"pattern": topic, "remote.storage.enable": True, "cleanup.policy": policy,
                 "retention.ms": 3600000}],
        http={"enabled": False},
    )
    for _ in range(2):  # copy, then expiry sees the copies
        d = Daemon(cfg, once=True).start()
        try:
            assert d.run_once() == 0
        finally:
            d.stop()
    with RemoteFetcher.from_config(cfg) as f:
        if kept:  # (remote compaction may have merged the segments: the history is what counts)
            plan = f.plan(topic, 0)
            assert (plan.log_start, plan.log_end) == (0, 300)
        else:
            assert topic not in f.topics() or not f.plan(topic, 0).segments
