"""``rlm restore`` into a new cluster: the newest remote segments written into a stopped broker's
partition directory are served by that broker at the same offsets, and new records continue at the
old end offset.

Cluster A (the session broker) tiers a topic (idempotent records, a committed and an aborted
transaction) into local storage + the file store. Cluster B is a new KRaft node: the topic is
created there (new topic id), the node is stopped, ``rlm restore`` writes the newest segments, the
node starts again. A consumer of B reads exactly what a consumer of A reads over the restored
range (offsets, keys, values, timestamps, headers; read_committed, so the aborted transaction is
hidden on both), B's earliest offset is the first restored offset and a new record gets the old
end offset. Not covered: an idempotent producer of A continuing on B (see the docs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from rlm.cli import main
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import read_partition_metadata
from tests.daemon.helpers import create_topic, produce, produce_txn, wait_for
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

Row = tuple[int, bytes | None, bytes | None, int, Any]


def consume(bootstrap: str, topic: str, start: int, end: int) -> list[Row]:
    """Records of ``[start, end)`` as a read_committed consumer sees them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rlm-restore-{topic}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        out: list[Row] = []
        for _ in range(600):
            for m in c.consume(500, timeout=1.0):
                assert m.error() is None, m.error()
                if m.offset() < end:
                    out.append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers()))
            pos = c.position([TopicPartition(topic, 0)])[0].offset
            if pos >= end:
                return out
        raise AssertionError(f"{topic}: consumer did not reach offset {end}")
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rlm-restore-wm-{topic}"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return int(low), int(high)
    finally:
        c.close()


def test_restored_tail_is_served_at_the_same_offsets(kafka: Any, unique_topic: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    topic, bs = unique_topic, kafka.bootstrap
    create_topic(bs, topic)  # 1 MiB segments
    produce(bs, topic, 1600, size=1000)
    produce_txn(bs, topic, f"{topic}-c", 300, commit=True, size=1000)
    produce_txn(bs, topic, f"{topic}-a", 300, commit=False, size=1000)
    produce(bs, topic, 1600, size=1000)
    work = tmp_path / "a"
    work.mkdir()
    cfg_file = work / "rlm.yaml"
    cfg_file.write_text(json.dumps({"log_dirs": [str(kafka.log_dir)], "work_dir": str(work),
                                    "bootstrap_servers": bs, "http": {"enabled": False},
                                    "topics": [{"pattern": topic, "remote.storage.enable": True}]}))
    d = Daemon(load_config(cfg_file), once=True).start()
    assert d.run_once() == 0
    assert d.stop()

    b = KafkaCluster(nodes=1, name="restore-b").start()
    try:
        create_topic(b.bootstrap, topic)  # same name, new cluster: a new topic id
        target = b.log_dir / f"{topic}-0"
        wait_for("partition dir on B", lambda: (target / "partition.metadata").exists())
        new_id = read_partition_metadata(target / "partition.metadata")
        b.stop_node(1)
        capsys.readouterr()
        assert main(["restore", "--config", str(cfg_file), "--topic", topic, "--log-dir", str(b.log_dir),
                     "--local-bytes", str(2 << 20), "--execute", "--json"]) == 0
        (part,) = json.loads(capsys.readouterr().out)["partitions"]
        assert part["skipped"] is None and len(part["segments"]) == 2, part
        assert part["new_topic_id"] == new_id.text
        first, nxt = part["first_offset"], part["next_offset"]
        assert first > 0
        # rerun on the restored (still stopped) directory: nothing new written
        assert main(["restore", "--config", str(cfg_file), "--topic", topic, "--log-dir", str(b.log_dir),
                     "--local-bytes", str(2 << 20), "--execute", "--json"]) == 0
        again = json.loads(capsys.readouterr().out)["partitions"][0]
        assert again["written"] == ["leader-epoch-checkpoint"]
        b.start_node(1)

        assert read_partition_metadata(target / "partition.metadata") == new_id
        assert watermarks(b.bootstrap, topic) == (first, nxt)
        want = consume(bs, topic, first, nxt)
        assert want and consume(b.bootstrap, topic, first, nxt) == want
        # not idempotent: B's producer-id allocator starts at 0 like A's did, so a new idempotent
        # producer can get a producer id the restored state already holds (docs/disaster-recovery.md)
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": False, "acks": "all"})
        got: list[int] = []
        p.produce(topic, value=b"after restore", partition=0,
                  on_delivery=lambda err, msg: got.append(-1 if err else msg.offset()))
        assert p.flush(30) == 0
        assert got == [nxt]
    finally:
        b.stop()
