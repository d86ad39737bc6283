"""End to end beside a real broker: S3 (SeaweedFS) + the topic-based metadata manager.

Data: plain records from an idempotent producer, committed and aborted transactions, then a
transaction left open while more plain data rolls further segments — so the LSO is well below
the log end and some rolled segments must *not* be copied until the transaction commits.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel
from confluent_kafka import TopicPartition as CkTp
from confluent_kafka.admin import AdminClient, OffsetSpec

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import TopicIdPartition
from tests.daemon.helpers import (
    check_segment_against_local,
    create_topic,
    dir_digest,
    finished,
    produce,
    produce_txn,
    s3_storage,
    topic_rlmm,
    transactional_producer,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


def lso_of(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.list_offsets(
        {CkTp(topic, 0): OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return int(next(iter(futs.values())).result().offset)


def test_tiers_every_eligible_segment(
    kafka: Any, seaweedfs: Any, seaweedfs_bucket: str, unique_topic: str, tmp_path: Path
) -> None:
    topic = unique_topic
    bs = kafka.bootstrap
    create_topic(bs, topic)
    produce(bs, topic, 9000)
    produce_txn(bs, topic, f"{topic}-tx1", 2000, commit=True)
    produce_txn(bs, topic, f"{topic}-tx2", 1500, commit=False)
    open_txn = transactional_producer(bs, f"{topic}-tx3")
    open_txn.begin_transaction()
    for i in range(300):
        open_txn.produce(topic, value=b"o" * 100, key=f"o{i}".encode(), partition=0)
    assert open_txn.flush(30) == 0
    produce(bs, topic, 12000)
    pdir_path = kafka.log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 5)
    time.sleep(1.5)  # let the broker go idle (flushes, snapshots) before hashing its dir
    lso = lso_of(bs, topic)
    before = dir_digest(pdir_path)

    cfg = load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp_path / "work"),
        bootstrap_servers=bs,
        storage=s3_storage(seaweedfs, seaweedfs_bucket),
        metadata=topic_rlmm(bs, tmp_path / "work"),
        topics=[{"pattern": topic, "remote.storage.enable": True}],
        task_interval_ms=200,
        http={"port": 0},
    )
    daemon = Daemon(cfg, once=True).start()
    assert daemon.run_once() == 0
    assert daemon.stop()

    pdir = PartitionDir(pdir_path)
    tip = TopicIdPartition(pdir.topic_id, topic, 0)
    rsm = load_rsm(cfg, 1)
    rlmm = load_rlmm(cfg.model_copy(update={"work_dir": tmp_path / "reader"}), 99)
    try:
        rlmm.on_partition_leadership_changes(set(), {tip})
        segs = finished(rlmm, tip)
        eligible = [s for s in pdir.inactive_segments() if pdir.next_segment(s).base_offset <= lso]  # type: ignore[union-attr]
        assert 0 < len(eligible) < len(pdir.inactive_segments()), "the open transaction must hold some back"
        assert [m.start_offset for m in segs] == [s.base_offset for s in eligible]
        assert all(m.end_offset < lso for m in segs)
        for m in segs:
            check_segment_against_local(rsm, m, pdir)
        assert dir_digest(pdir_path) == before, "the daemon must never change the broker's files"

        # commit: the LSO moves to the end and the daemon (continuous mode) tiers the rest
        open_txn.commit_transaction(30)
        wait_for("LSO at log end", lambda: lso_of(bs, topic) > lso)
        cfg2 = cfg.model_copy(update={"http": cfg.http.model_copy(update={"port": 0})})
        daemon2 = Daemon(cfg2).start()
        try:
            pdir.refresh()
            want = [s.base_offset for s in pdir.inactive_segments()]
            wait_for(
                "all rolled segments tiered",
                lambda: [m.start_offset for m in finished(daemon2.ctx.rlmm, tip)] == want,  # type: ignore[union-attr]
                timeout=60,
            )
            assert daemon2.http is not None
            port = daemon2.http.port
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            assert f'rlm_remote_copy_segments_total{{partition="0",topic="{topic}"}}' in metrics
            assert "rlm_remote_copy_gap_segments_total" in metrics and "_created" not in metrics
            health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read())
            assert health["status"] == "ok"
        finally:
            assert daemon2.stop(10)
        # a fresh reader of the metadata topic sees every segment exactly once, all byte-identical
        reader = load_rlmm(cfg.model_copy(update={"work_dir": tmp_path / "reader2"}), 98)
        try:
            reader.on_partition_leadership_changes(set(), {tip})
            segs = finished(reader, tip)
            assert [m.start_offset for m in segs] == want
            for m in segs:
                check_segment_against_local(rsm, m, pdir)
        finally:
            reader.close()
        status = json.loads((tmp_path / "work" / "status.json").read_text())
        p = status["partitions"][f"{topic}-0"]
        assert p["remote_end"] == segs[-1].end_offset and p["last_error"] is None
    finally:
        rlmm.close()
        rsm.close()
