"""A broker of our own, restarted once: leader epochs across the restart, and a partition
directory written by :class:`PartitionWriter` that the broker loads and serves.

Procedure (kafka-log-format.md §8): create the topic through the broker so its topic id
exists, stop the broker, replace the empty partition with our files (leader epoch 0, correct
snapshots, the broker's clean-shutdown marker kept, so nothing is recovered or rebuilt),
start it again and consume everything with read_committed and read_uncommitted.
"""

from __future__ import annotations

import random
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from rlm.log.checkpoints import has_clean_shutdown, read_partition_metadata
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_batches
from rlm.log.writer import write_log_dir_files
from rlm.types import TopicPartition
from tests.log_files._data import Expected, write_partition
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# retention.ms=-1: the written partition holds 2023 timestamps, and test brokers run retention 1 s
# after a start (log.initial.task.delay.ms), which would delete it before it is consumed
CONFIG = {"segment.bytes": "1048576", "index.interval.bytes": "1024", "retention.ms": "-1"}
FIRST, SECOND = 400, 300


@dataclass
class Cycle:
    cluster: KafkaCluster
    epochs_topic: str
    written_topic: str
    expected: Expected
    written_files: dict[str, bytes]


def _wait(cond: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.size": 4096})
    rnd = random.Random(n)
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=rnd.randbytes(200))
    assert p.flush(60) == 0


@pytest.fixture(scope="module")
def cycle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cycle]:
    cluster = KafkaCluster(nodes=1, name="kafka-logload").start()
    try:
        epochs_topic, written_topic = f"epochs-{uuid.uuid4().hex[:6]}", f"written-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(t, 1, 1, config=CONFIG) for t in (epochs_topic, written_topic)]
                                     ).values():
            f.result(30)
        _produce(cluster.bootstrap, epochs_topic, FIRST)
        wdir = cluster.log_dir / f"{written_topic}-0"
        _wait(lambda: (wdir / "partition.metadata").exists(), "partition.metadata")
        topic_id = read_partition_metadata(wdir / "partition.metadata")
        cluster.stop_node(1)
        assert has_clean_shutdown(cluster.log_dir)
        shutil.rmtree(wdir)
        exp = write_partition(wdir, topic_id=topic_id, leave_open=False, epoch_change_at=None,
                              segment_bytes=128 * 1024, batches=300)
        write_log_dir_files(cluster.log_dir, [(TopicPartition(written_topic, 0), exp.log_end_offset)])
        files = {f.name: f.read_bytes() for f in wdir.iterdir()}
        cluster.start_node(1)
        _produce(cluster.bootstrap, epochs_topic, SECOND)
        yield Cycle(cluster, epochs_topic, written_topic, exp, files)
    finally:
        cluster.stop()


def test_leader_epoch_checkpoint_across_a_restart(cycle: Cycle) -> None:
    p = PartitionDir(cycle.cluster.log_dir / f"{cycle.epochs_topic}-0")
    epochs = p.leader_epochs()
    assert len(epochs) >= 2 and (epochs[0].epoch, epochs[0].start_offset) == (0, 0)
    assert epochs[-1].start_offset == FIRST and epochs[-1].epoch > 0
    batch_epochs = {h.base_offset: h.partition_leader_epoch
                    for s in p.segments for h in iter_batches(s.log_path)}
    assert set(batch_epochs.values()) == {epochs[0].epoch, epochs[-1].epoch}
    for base, epoch in batch_epochs.items():
        covering = [(e, start) for e, start in p.epochs_for_range(0, FIRST + SECOND) if start <= base][-1]
        assert covering[0] == epoch
    assert p.epochs_for_range(10, FIRST) == [(0, 10)]
    assert p.epochs_for_range(FIRST - 5, FIRST + 5) == [(0, FIRST - 5), (epochs[-1].epoch, FIRST)]
    assert p.epochs_for_range(FIRST + 5, FIRST + 50) == [(epochs[-1].epoch, FIRST + 5)]


def _consume(cycle: Cycle, level: str, n: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
    c = Consumer({"bootstrap.servers": cycle.cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "isolation.level": level, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([CkTopicPartition(cycle.written_topic, 0, 0)])
    out: list[tuple[int, bytes | None, bytes | None, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    finally:
        c.close()
    return out


def test_broker_serves_a_partition_we_wrote(cycle: Cycle) -> None:
    exp = cycle.expected
    for level, committed in (("read_committed", True), ("read_uncommitted", False)):
        want = exp.visible(read_committed=committed)
        got = _consume(cycle, level, len(want))
        assert [(o, k, v) for o, k, v, _ in got] == want, level
    got = _consume(cycle, "read_uncommitted", len(exp.records))
    assert [t for *_, t in got] == [r[4] for r in exp.records]
    assert sum(1 for r in exp.records if not r[5]) > 10  # aborted records were really filtered
    admin = AdminClient({"bootstrap.servers": cycle.cluster.bootstrap})
    tp = CkTopicPartition(cycle.written_topic, 0)
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        res = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
        assert res[tp].result(30).offset == exp.log_end_offset


def test_broker_kept_our_files(cycle: Cycle) -> None:
    """The broker kept the closed segments' files byte for byte (loaded as is after the clean
    shutdown; a recovery would have had to rebuild exactly the same bytes)."""
    d = cycle.cluster.log_dir / f"{cycle.written_topic}-0"
    p = PartitionDir(d)
    for seg in p.inactive_segments():
        for f in (seg.log_path, seg.index_path, seg.time_index_path, seg.txn_index_path):
            if f.name in cycle.written_files:
                assert f.read_bytes() == cycle.written_files[f.name], f.name
    topic_id = read_partition_metadata(d / "partition.metadata").text
    assert topic_id in cycle.written_files["partition.metadata"].decode()
    assert not list(Path(d).glob("*.deleted"))
