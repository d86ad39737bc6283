"""A keyed workload on a compacted topic, the uncleaned copy of its segments, and the broker's
own cleaner run on them: the reference remote compaction is compared with (tests, benchmark).

The topic is created with ``min.cleanable.dirty.ratio=1`` and a one-day ``min.compaction.lag.ms``
so the cleaner leaves it alone while the workload is written and the rolled segments are copied
aside; :func:`release_cleaner` then lets the broker's cleaner clean everything below the active
segment, and the ``cleaner-offset-checkpoint`` says when it has.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlm.log.checkpoints import read_offset_checkpoint
from rlm.log.txn_index import AbortedTxn, read_txn_index
from rlm.types import TopicPartition
from tests.daemon.helpers import set_topic_config
from tests.services.kafka import KafkaCluster
from tests.services.proc import wait_until

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1048576",
    "min.cleanable.dirty.ratio": "1",  # a never-cleaned log's dirty ratio is 1.0: never above this
    "min.compaction.lag.ms": "86400000",  # and no segment is old enough to be cleanable
    "index.interval.bytes": "4096",
}


@dataclass
class Workload:
    """What was written: the committed model (key -> latest value, None = deleted)."""

    model: dict[bytes, bytes | None] = field(default_factory=dict)
    aborted_values: set[bytes] = field(default_factory=set)
    deleted_then_rewritten: set[bytes] = field(default_factory=set)
    records: int = 0


def create_topic(cluster: KafkaCluster, topic: str, **extra: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fut = admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIG, **extra})])[topic]
    fut.result(60)


def _value(rng: random.Random, key: int, round_no: int, size: int) -> bytes:
    head = f"v{key}-{round_no}-".encode()
    return head + rng.randbytes(max(0, size - len(head)))  # incompressible: segments roll


def write(cluster: KafkaCluster, topic: str, *, keys: int = 2000, rounds: int = 12, value_size: int = 300,
          seed: int = 7) -> Workload:
    """Updates of ``keys`` keys in ``rounds`` rounds from an idempotent lz4 producer, a plain zstd
    producer (no producer id) and a transactional producer whose every third transaction aborts;
    every round deletes some keys, and later rounds re-write some deleted ones."""
    rng = random.Random(seed)
    wl = Workload()
    base = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 5}
    idem = Producer({**base, "enable.idempotence": True, "compression.type": "lz4"})
    plain = Producer({**base, "enable.idempotence": False, "acks": 1, "compression.type": "zstd"})
    txn = Producer({**base, "transactional.id": f"{topic}-txn", "compression.type": "none"})
    txn.init_transactions(60)
    deleted: set[bytes] = set()
    for r in range(rounds):
        for k in range(keys):
            if rng.random() < 0.5:
                continue
            key = b"key-%05d" % k
            if rng.random() < 0.05:
                idem.produce(topic, key=key, value=None)
                wl.model[key] = None
                deleted.add(key)
            else:
                prod = idem if rng.random() < 0.7 else plain
                value = _value(rng, k, r, value_size)
                prod.produce(topic, key=key, value=value)
                if key in deleted:
                    wl.deleted_then_rewritten.add(key)
                wl.model[key] = value
            wl.records += 1
        # plain and idempotent writes of one key must land in order: flush both before transactions
        idem.flush(60)
        plain.flush(60)
        for t in range(3):
            txn.begin_transaction()
            staged: dict[bytes, bytes | None] = {}
            for _ in range(20):
                k = rng.randrange(keys)
                key = b"key-%05d" % k
                value = b"txn-%d-%d-" % (r, t) + _value(rng, k, r, value_size // 2)
                txn.produce(topic, key=key, value=value)
                staged[key] = value
                wl.records += 1
            if t == 2:
                txn.flush(60)  # else librdkafka purges the unsent records and nothing is aborted
                txn.abort_transaction(60)
                wl.aborted_values.update(v for v in staged.values() if v is not None)
            else:
                txn.commit_transaction(60)
                wl.model.update(staged)
    idem.flush(60)
    plain.flush(60)
    return wl


def partition_dir(cluster: KafkaCluster, topic: str) -> Path:
    return cluster.log_dir / f"{topic}-0"


def segment_files(pdir: Path) -> list[Path]:
    return sorted(pdir.glob("*.log"))


def copy_rolled(pdir: Path, dest: Path) -> tuple[list[Path], list[AbortedTxn], int]:
    """Copy every rolled segment (all but the active one) with its ``.txnindex``; returns the
    copies, the aborted transactions of the whole log and the active segment's base offset."""
    dest.mkdir(parents=True, exist_ok=True)
    logs = segment_files(pdir)
    active = int(logs[-1].name.removesuffix(".log"))
    copies = []
    for log in logs[:-1]:
        copies.append(Path(shutil.copy2(log, dest / log.name)))
    aborted = [t for idx in sorted(pdir.glob("*.txnindex")) for t in read_txn_index(idx)]
    return copies, aborted, active


def release_cleaner(cluster: KafkaCluster, topic: str) -> None:
    """Let the broker's cleaner clean the topic (dirty ratio 0.01, no compaction lag)."""
    set_topic_config(
        cluster.bootstrap, topic, **{"min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}
    )


def cleaner_checkpoint(cluster: KafkaCluster, topic: str) -> int:
    path = cluster.log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return -1
    return read_offset_checkpoint(path).get(TopicPartition(topic, 0), -1)


def wait_cleaned(cluster: KafkaCluster, topic: str, up_to: int, *, timeout: float = 120.0) -> None:
    """Wait until the broker's cleaner checkpoint for the topic reaches ``up_to``."""
    wait_until(f"the log cleaner to clean {topic} up to {up_to}",
               lambda: cleaner_checkpoint(cluster, topic) >= up_to, timeout=timeout,
               proc=cluster.node(1).proc, log=cluster.node(1).log)
