"""One mixed, tiered topic shared by the read-side end-to-end tests (built once per session).

A real broker + SeaweedFS + the topic metadata store; ``rlm run --once`` tiers it. Data: every
codec, headers, CreateTime out of order, a LogAppendTime stretch, committed and aborted
transactions, a leader bounce (node restart: a new leader epoch) and a transaction left open
(the LSO, hence the tiered range, stops before it). Before anything is deleted we record what a
confluent-kafka consumer reads (both isolation levels) and the broker's ListOffsets answers;
then the broker's own retention (``retention.bytes`` set tiny on the topic *after* tiering, the
sidecar's remote retention -1, as docs/operations.md describes) deletes the tiered segments, so
every later read can only come from remote storage.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import (
    create_topic,
    produce_txn,
    s3_storage,
    set_topic_config,
    topic_rlmm,
    transactional_producer,
    wait_for,
)
from tests.services.kafka import KafkaCluster
from tests.services.s3 import SeaweedFS

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# (offset, timestamp type, timestamp, key, value, headers) — what a consumer sees
Rec = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class Tiered:
    topic: str
    bootstrap: str
    cfg: DaemonConfig  # the reader's config (its own work dir and metadata consumer dir)
    config_path: Path  # the same, as a file for the CLI
    remote_end: int  # first offset not tiered
    local_start: int  # the broker's log start after retention
    uncommitted: list[Rec]
    committed: list[Rec]
    list_offsets: dict[int, int | None]  # timestamp → broker's answer (before deletion)
    epochs_seen: list[int]
    tmp: Path
    open_txn: Any = None
    extras: dict[str, Any] = field(default_factory=dict)


def _producer(bs: str, **conf: Any) -> Producer:
    return Producer(
        {"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5, "batch.size": 32768, **conf}
    )


def _produce_random(
    p: Producer, topic: str, n: int, rnd: random.Random, tag: str, *, timestamps: list[int] | None = None
) -> None:
    for i in range(n):
        headers = [("h", f"{tag}{i}".encode()), ("nil", None)] if i % 7 == 0 else None
        kw: dict[str, Any] = {"timestamp": timestamps[i]} if timestamps else {}
        key = None if i % 11 == 0 else f"{tag}-{i}".encode()
        p.produce(
            topic, key=key, value=rnd.randbytes(rnd.randint(200, 800)), partition=0, headers=headers, **kw
        )
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def consume_all(bs: str, topic: str, isolation: str, until: int) -> list[Rec]:
    """Everything a consumer reads from offset 0 until its position reaches ``until``."""
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"rec-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    tp = TopicPartition(topic, 0, 0)
    c.assign([tp])
    out: list[Rec] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error() is not None:
                    continue
                ts_type, ts = m.timestamp()
                hdrs = tuple((k, v) for k, v in (m.headers() or []))
                out.append((m.offset(), ts_type, ts, m.key(), m.value(), hdrs))
            if c.position([TopicPartition(topic, 0)])[0].offset >= until:
                return out
        raise AssertionError(f"consumer ({isolation}) did not reach offset {until}")
    finally:
        c.close()


def _watermarks(bs: str, topic: str, isolation: str = "read_uncommitted") -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "wm", "isolation.level": isolation})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def lso_of(bs: str, topic: str) -> int:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": bs})
    futs = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return int(next(iter(futs.values())).result().offset)


def broker_offsets_for_times(bs: str, topic: str, timestamps: list[int]) -> dict[int, int | None]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "oft"})
    try:
        out: dict[int, int | None] = {}
        for ts in timestamps:
            got = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0]
            out[ts] = got.offset if got.offset >= 0 else None
        return out
    finally:
        c.close()


def _build(kafka: KafkaCluster, seaweedfs: SeaweedFS, tmp: Path) -> Tiered:
    bs = kafka.bootstrap
    topic = f"fetch-e2e-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    rnd = random.Random(9)
    for codec in CODECS:  # every codec, incompressible values so segments roll
        _produce_random(_producer(bs, **{"compression.type": codec}), topic, 700, rnd, codec)
    now = int(time.time() * 1000)
    ooo = [now - 3_600_000 + (i * 7919) % 600_000 for i in range(800)]  # CreateTime out of order
    _produce_random(_producer(bs, **{"compression.type": "lz4"}), topic, 800, rnd, "ooo", timestamps=ooo)
    produce_txn(bs, topic, f"{topic}-c", 600, commit=True)
    aborted = transactional_producer(bs, f"{topic}-a")
    aborted.begin_transaction()
    for i in range(500):
        aborted.produce(topic, key=f"a{i}".encode(), value=rnd.randbytes(300), partition=0)
    assert aborted.flush(30) == 0  # written, then aborted (abort alone would purge the queue)
    aborted.abort_transaction(30)
    set_topic_config(bs, topic, **{"message.timestamp.type": "LogAppendTime"})
    time.sleep(1.0)  # topic config changes reach the log asynchronously
    _produce_random(_producer(bs, **{"compression.type": "zstd"}), topic, 600, rnd, "lat")
    set_topic_config(bs, topic, **{"message.timestamp.type": "CreateTime"})
    time.sleep(1.0)
    # leader bounce: restarting the only replica gives the partition a new leader epoch
    kafka.stop_node(1)
    kafka.start_node(1)
    wait_for(
        "leader back",
        lambda: (
            AdminClient({"bootstrap.servers": bs})
            .list_topics(topic, timeout=5)
            .topics[topic]
            .partitions[0]
            .leader
            == 1
        ),
        timeout=60,
    )
    for codec in ("snappy", "none", "gzip"):
        _produce_random(_producer(bs, **{"compression.type": codec}), topic, 1500, rnd, f"b-{codec}")
    produce_txn(bs, topic, f"{topic}-c2", 400, commit=True)
    # left open for the whole session: the coordinator would abort it after librdkafka's default
    # 60 s transaction timeout (writing an ABORT marker the recorded answers do not know)
    open_txn = Producer(
        {"bootstrap.servers": bs, "transactional.id": f"{topic}-open", "transaction.timeout.ms": 900_000}
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(50):
        open_txn.produce(topic, key=f"open{i}".encode(), value=b"o" * 100, partition=0)
    assert open_txn.flush(30) == 0
    _produce_random(_producer(bs), topic, 1500, rnd, "tail")
    pdir = PartitionDir(kafka.log_dir / f"{topic}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 5)

    _, hw = _watermarks(bs, topic)
    lso = lso_of(bs, topic)
    uncommitted = consume_all(bs, topic, "read_uncommitted", hw)
    committed = consume_all(bs, topic, "read_committed", lso)
    assert any(r[1] == TIMESTAMP_LOG_APPEND_TIME for r in uncommitted), "no LogAppendTime record"
    stamps = sorted({r[2] for r in uncommitted})
    # evenly spaced records' own timestamps as well as random ones: a sample alone may hold only
    # the out-of-order stamps (answered by offset 0), and tests need answers inside the history
    spaced = [r[2] for r in uncommitted[:: max(1, len(uncommitted) // 40)]]
    probe = sorted({stamps[0] - 1, stamps[-1] + 1, *ooo[::37], *rnd.sample(stamps, 60), *spaced})
    answers = broker_offsets_for_times(bs, topic, probe)

    work = tmp / "work"
    sidecar: dict[str, Any] = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(work),
        "bootstrap_servers": bs,
        "storage": s3_storage(seaweedfs, seaweedfs.create_bucket("fetch-e2e")),
        "metadata": topic_rlmm(bs, work),
        "topics": [
            {"pattern": topic, "remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1}
        ],
        "task_interval_ms": 200,
        "http": {"enabled": False},
    }
    d = Daemon(load_config(None, **sidecar), once=True).start()
    assert d.run_once() == 0
    assert d.stop()

    # the reader: its own work dir (index cache) and metadata consumer dir
    rwork = tmp / "reader"
    # a loaded CI machine: reads must not time out at Kafka's 500 ms
    reader = {
        **sidecar,
        "work_dir": str(rwork),
        "metadata": topic_rlmm(bs, rwork),
        "read": {"fetch_max_wait_ms": 30_000},
    }
    del reader["log_dirs"]
    cfg = load_config(None, **reader)
    config_path = tmp / "reader.yaml"
    config_path.write_text(yaml.safe_dump(reader))

    from fetcher import RemoteFetcher

    with RemoteFetcher.from_config(cfg) as f:
        plan = f.plan(topic, 0)
        remote_end = plan.log_end
        epochs = [e for e, _ in plan.lineage]
    assert plan.log_start == 0 and remote_end <= lso

    # the broker's local retention deletes what was tiered (remote retention stays -1)
    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    wait_for(
        "local retention deleted the tiered segments",
        lambda: _watermarks(bs, topic)[0] >= remote_end,
        timeout=90,
    )
    local_start = _watermarks(bs, topic)[0]
    return Tiered(
        topic,
        bs,
        cfg,
        config_path,
        remote_end,
        local_start,
        uncommitted,
        committed,
        answers,
        epochs,
        tmp,
        open_txn,
    )


@pytest.fixture(scope="session")
def tiered(
    kafka: KafkaCluster, seaweedfs: SeaweedFS, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tiered]:
    t = _build(kafka, seaweedfs, tmp_path_factory.mktemp("fetch-e2e"))
    try:
        yield t
    finally:
        with contextlib.suppress(Exception):  # the broker may already be stopping at session end
            t.open_txn.abort_transaction(30)


@pytest.fixture(scope="session")
def fetcher(tiered: Tiered) -> Iterator[Any]:
    from fetcher import RemoteFetcher

    with RemoteFetcher.from_config(tiered.cfg) as f:
        yield f
