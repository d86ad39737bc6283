"""One broker per Kafka version per session, and one written, tiered topic on each.

``compat_kafka`` is parameterized over :data:`BROKERS` (version, mode). pytest groups the tests of
a session-scoped parameter together, so each broker starts once, serves every test of its
version, and is stopped before the next version's starts (two cores: never two brokers at once).

``written`` (per broker): a workload with every codec, keys (some null), headers (some null), an
idempotent producer, a committed and an aborted transaction; the broker's answers are recorded (a
consumer under both isolation levels, ListOffsets by timestamp); ``rlm check``, ``rlm run --once``
(the sidecar's own per-topic ``remote.storage.enable``: none of these brokers has tiered storage
on) and ``rlm status`` run; then the broker's own retention deletes the tiered segments. The
metadata topic has Kafka's default 50 partitions and every consumer of it the default
``remote.log.metadata.consume.wait.ms``: what an operator gets without tuning (the issue's cold
reads failed after ~27 s with it, tests with 3 partitions never saw that).
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.config import load_config
from tests.daemon.helpers import (
    create_topic,
    produce_txn,
    set_topic_config,
    topic_rlmm,
    transactional_producer,
    wait_for,
)
from tests.fetcher_e2e.conftest import (
    CODECS,
    Rec,
    _produce_random,
    _producer,
    _watermarks,
    consume_all,
    lso_of,
)
from tests.services.kafka import DEFAULT_VERSION, KafkaCluster

# (version, zookeeper): 2.8 is ZooKeeper only; 3.5 runs in both modes (the last minor line where
# clusters on ZooKeeper and on KRaft are both common); 3.9 and 4.x in KRaft; the default is KRaft 4.1.1
BROKERS: list[tuple[str, bool]] = [
    ("2.8.2", True),
    ("3.5.2", True),
    ("3.5.2", False),
    ("3.9.2", False),
    (DEFAULT_VERSION, False),
    ("4.4.0", False),
]

#: Kafka's default ``remote.log.metadata.topic.num.partitions``
METADATA_PARTITIONS = 50


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def broker_id(param: tuple[str, bool]) -> str:
    version, zk = param
    return f"{version}-{'zk' if zk else 'kraft'}"


@pytest.fixture(scope="session", params=BROKERS, ids=broker_id)
def compat_kafka(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    version, zk = request.param
    cluster = KafkaCluster(nodes=1, name=f"compat-{broker_id(request.param)}", version=version, zookeeper=zk)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Written:
    """One version's topic after tiering and the broker's deletion, and what the broker served."""

    cluster: KafkaCluster
    topic: str
    tmp: Path
    config_path: Path  # the sidecar's rlm.yaml
    reader_path: Path  # a reader's (no log dirs, its own work dir; warm after the fixture)
    check: subprocess.CompletedProcess[str]
    run: subprocess.CompletedProcess[str]
    status: dict[str, Any]
    remote_end: int
    uncommitted: list[Rec]  # the whole log as the broker served it before deleting
    committed: list[Rec]
    list_offsets: dict[int, int]  # timestamp -> the first offset at or after it (KIP-33), tiered range
    broker_offsets: dict[int, int]  # timestamp -> the broker's ListOffsets answer before deletion
    codecs: set[str]  # the compression of the batches in the first segment, as written

    def reader(self, name: str) -> Path:
        """A reader configuration with a fresh work dir: its first read is a cold one."""
        doc = yaml.safe_load(self.reader_path.read_text())
        doc["work_dir"] = str(self.tmp / name)
        doc["metadata"]["config"]["log.dir"] = str(self.tmp / name / "m")
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def want(self, isolation: str, end: int | None = None) -> list[Rec]:
        """What the broker served below ``end`` (default: the remote end) at ``isolation``."""
        recs = self.committed if isolation == "read_committed" else self.uncommitted
        return [r for r in recs if r[0] < (self.remote_end if end is None else end)]


def rlm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args], capture_output=True, text=True, timeout=timeout
    )


class _Compressible(random.Random):
    """Random values that compress: librdkafka sends a batch uncompressed when compressing does
    not make it smaller, so random bytes would leave every codec but ``none`` unwritten."""

    def randbytes(self, n: int) -> bytes:
        return bytes(self.choices(b"rlm sidecar", k=n))


def _workload(bs: str, topic: str) -> None:
    """Small (about 2.5 MB: three 1 MiB segments) but every kind of batch the formats have."""
    rnd = random.Random(40)
    for codec in CODECS:
        _produce_random(_producer(bs, **{"compression.type": codec}), topic, 300, _Compressible(codec), codec)
    produce_txn(bs, topic, f"{topic}-c", 300, commit=True)
    aborted = transactional_producer(bs, f"{topic}-a")
    aborted.begin_transaction()
    for i in range(200):
        aborted.produce(topic, key=f"a{i}".encode(), value=rnd.randbytes(300), partition=0)
    assert aborted.flush(30) == 0  # written, then aborted
    aborted.abort_transaction(30)
    _produce_random(_producer(bs), topic, 2000, rnd, "tail")


def gap_stamps(recs: list[Rec], n: int) -> list[int]:
    """Up to ``n`` timestamps inside ``recs`` that no record has, spread over them: one past a
    record's whose next record is at least 2 ms later, so the answer (the next record) is the
    first record of a batch written after a pause, not one of many records sharing a millisecond.
    Only where that next record is the very next offset: an offset between them is a transaction
    marker, which has a timestamp of its own and is what ListOffsets answers when it is the first
    at or after the time (the records here are data records only, so they cannot say that)."""
    taken = {r[2] for r in recs}
    gaps = [a[2] + 1 for a, b in itertools.pairwise(recs)
            if b[0] == a[0] + 1 and b[2] - a[2] >= 2 and a[2] + 1 not in taken]
    return sorted({gaps[i * len(gaps) // n] for i in range(n)}) if gaps else []


def broker_list_offsets(bs: str, topic: str, stamps: list[int]) -> dict[int, int]:
    """The broker's ListOffsets answer (first offset with a timestamp >= ts) for each stamp."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": f"lo-{uuid.uuid4().hex[:8]}"})
    try:  # one call per time: librdkafka asks one time per partition and request
        return {ts: int(c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)[0].offset)
                for ts in stamps}
    finally:
        c.close()


@pytest.fixture(scope="session")
def written(compat_kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Written:
    kafka = compat_kafka
    tmp = tmp_path_factory.mktemp(f"compat-{kafka.version}")
    bs = kafka.bootstrap
    topic = f"compat-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    _workload(bs, topic)
    dump = rlm("dump", "--json", str(kafka.log_dir / f"{topic}-0" / "00000000000000000000.log"))
    codecs = {json.loads(line)["compression"] for line in dump.stdout.splitlines()}
    _, hw = _watermarks(bs, topic)
    uncommitted = consume_all(bs, topic, "read_uncommitted", hw)
    committed = consume_all(bs, topic, "read_committed", lso_of(bs, topic))

    work = tmp / "work"
    meta_topic = f"__rlm_meta_{uuid.uuid4().hex[:8]}"
    metadata = topic_rlmm(bs, work, partitions=METADATA_PARTITIONS)
    metadata["config"]["remote.log.metadata.topic.name"] = meta_topic
    del metadata["config"]["remote.log.metadata.consume.wait.ms"]  # Kafka's default wait
    sidecar: dict[str, Any] = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": bs,
        "storage": {"plugin": "local", "config": {"root": str(tmp / "remote")}},
        "metadata": metadata,
        "topics": [
            {"pattern": topic, "remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}
        ],
        "http": {"enabled": False},
    }
    config_path = tmp / "rlm.yaml"
    config_path.write_text(yaml.safe_dump(sidecar))
    check = rlm("check", "--config", str(config_path))
    run = rlm("run", "--once", "--config", str(config_path))
    status = json.loads(rlm("status", "--json", "--config", str(config_path)).stdout or "{}")

    reader = {**sidecar, "work_dir": str(tmp / "reader"), "read": {"fetch_max_wait_ms": 30_000}}
    reader["metadata"] = {**metadata, "config": {**metadata["config"], "log.dir": str(tmp / "reader" / "m")}}
    del reader["log_dirs"]
    reader_path = tmp / "reader.yaml"
    reader_path.write_text(yaml.safe_dump(reader))
    remote_end = 0
    if run.returncode == 0:
        from fetcher import RemoteFetcher

        with RemoteFetcher.from_config(load_config(None, **reader)) as f:
            remote_end = f.plan(topic, 0).log_end
    inside = [r for r in uncommitted if r[0] < remote_end]
    stamps = gap_stamps(inside, 3)
    list_offsets = {ts: next(r[0] for r in inside if r[2] >= ts) for ts in stamps}
    broker_offsets = broker_list_offsets(bs, topic, stamps) if stamps else {}  # asked before deletion
    if remote_end > 0:  # the broker's own retention deletes what was tiered
        set_topic_config(bs, topic, **{"retention.bytes": "1"})
        wait_for(
            "local retention deleted the tiered range", lambda: _watermarks(bs, topic)[0] >= remote_end, 120
        )
    return Written(
        kafka, topic, tmp, config_path, reader_path, check, run, status, remote_end, uncommitted, committed,
        list_offsets, broker_offsets, codecs,
    )
