"""Remote retention by time and size deletes exactly the expected segments; topic deletion empties remote."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm
from rlm.types import RemotePartitionDeleteState, TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, topic_rlmm, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
HOUR = 3600 * 1000


def config(kafka: Any, topic: str, tmp_path: Path, **topic_cfg: Any) -> DaemonConfig:
    return load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp_path / "work"),
        bootstrap_servers=kafka.bootstrap,
        storage={"plugin": "local", "config": {"root": str(tmp_path / "remote"), "fsync": False}},
        metadata=topic_rlmm(kafka.bootstrap, tmp_path / "work"),
        topics=[{"pattern": topic, "remote.storage.enable": True, **topic_cfg}],
        task_interval_ms=200,
        partition_remover_interval_ms=200,
        leadership_refresh_interval_ms=300,
        rescan_interval_ms=300,
        http={"enabled": False},
    )


def once(cfg: DaemonConfig) -> list[Any]:
    """One ``--once`` pass; returns the partition's finished segments afterwards."""
    d = Daemon(cfg, once=True).start()
    try:
        assert d.run_once() == 0
        (tip,) = d.managed()
        return finished(d.ctx.rlmm, tip)  # type: ignore[union-attr]
    finally:
        d.stop()


def produce_aged(bs: str, topic: str, n: int, ts: int) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2, "batch.size": 16384, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, value=b"a" * 200, key=f"{i}".encode(), partition=0, timestamp=ts + i)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def test_retention_by_time(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    now = int(time.time() * 1000)
    produce_aged(bs, unique_topic, 10000, now - 3 * HOUR)  # ~2 segments of 3-hour-old records
    produce(bs, unique_topic, 10000)
    pdir = PartitionDir(kafka.log_dir / f"{unique_topic}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 5)
    before = once(config(kafka, unique_topic, tmp_path))
    assert len(before) >= 4
    cutoff = int(time.time() * 1000) - HOUR
    expected_deleted = []
    for m in before:
        if m.max_timestamp_ms > cutoff:
            break
        expected_deleted.append(m.remote_log_segment_id)
    assert 1 <= len(expected_deleted) < len(before)
    after = once(config(kafka, unique_topic, tmp_path, **{"retention.ms": HOUR}))
    assert [m.remote_log_segment_id for m in after] == [
        m.remote_log_segment_id for m in before if m.remote_log_segment_id not in expected_deleted
    ]
    remote_files = {f.name[21:].split(".")[0] for f in (tmp_path / "remote").rglob("*.log")}
    assert remote_files == {m.remote_log_segment_id.id.text for m in after}


def test_retention_by_size(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 22000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 5)
    before = once(config(kafka, unique_topic, tmp_path))
    assert len(before) >= 4
    pdir = PartitionDir(pdir_path)
    active = pdir.active_segment
    assert active is not None
    total = sum(m.segment_size_in_bytes for m in before) + active.size()
    # breach = first two segments + 1 byte: Kafka deletes a segment only while the breach stays >= 0
    limit = total - (before[0].segment_size_in_bytes + before[1].segment_size_in_bytes) + 1
    after = once(config(kafka, unique_topic, tmp_path, **{"retention.bytes": limit}))
    assert [m.remote_log_segment_id for m in after] == [m.remote_log_segment_id for m in before[1:]]
    limit = total - (before[0].segment_size_in_bytes + before[1].segment_size_in_bytes)
    after = once(config(kafka, unique_topic, tmp_path, **{"retention.bytes": limit}))
    assert [m.remote_log_segment_id for m in after] == [m.remote_log_segment_id for m in before[2:]]


def test_topic_deletion_empties_remote(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 12000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 3)
    tip = TopicIdPartition(PartitionDir(pdir_path).topic_id, unique_topic, 0)
    d = Daemon(config(kafka, unique_topic, tmp_path)).start()
    try:
        rlmm = d.ctx.rlmm  # type: ignore[union-attr]
        wait_for("segments tiered", lambda: len(finished(rlmm, tip)) >= 2)
        assert any((tmp_path / "remote").rglob("*.log"))
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_topics([unique_topic])[unique_topic].result(30)
        wait_for(
            "remote storage empty",
            lambda: not any(f.is_file() for f in (tmp_path / "remote").rglob("*")),
            timeout=90,
        )
        wait_for("partition no longer managed", lambda: not d.managed() and not d.remover.pending())
    finally:
        d.stop(10)
    cfg = config(kafka, unique_topic, tmp_path)
    reader = load_rlmm(cfg.model_copy(update={"work_dir": tmp_path / "reader"}), 99)
    try:
        reader.on_partition_leadership_changes(set(), {tip})
        state = reader.remote_partition_delete_state(tip)
        assert state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        assert not list(reader.list_remote_log_segments(tip))
    finally:
        reader.close()
