"""A real broker's topic, tiered by the daemon, its local segments then deleted: consumers read
the deleted history through the endpoint, and in merged mode the whole log through one address.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import consume_partition, create_topic, produce, produce_txn, topic_rlmm, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
Rows = list[tuple[int, bytes | None, bytes | None]]


def _config(kafka: Any, topic: str, tmp: Path, work: str) -> DaemonConfig:
    return load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp / work),
        bootstrap_servers=kafka.bootstrap,
        storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        metadata=topic_rlmm(kafka.bootstrap, tmp / work),
        topics=[{"pattern": topic, "remote.storage.enable": True}],
        task_interval_ms=200,
        leadership_refresh_interval_ms=300,
        rescan_interval_ms=300,
        http={"enabled": False},
    )


def _read(
    bootstrap: str, topic: str, isolation: str, until: int | None = None, keys: set[bytes] | None = None
) -> Rows:
    """From offset 0 until offset ``until`` (exclusive) was passed, or every key in ``keys`` seen."""
    return consume_partition(bootstrap, topic, 0, isolation, until=until, keys=keys)


@dataclass
class Tiered:
    topic: str
    bootstrap: str
    fetcher: RemoteFetcher
    before: dict[str, Rows]  # what the broker served before deletion, per isolation level
    remote_end: int
    tmp: Path


@pytest.fixture(scope="module")
def tiered(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    tmp = tmp_path_factory.mktemp("kafka-endpoint-broker")
    topic = f"endpoint-{uuid.uuid4().hex[:8]}"
    bs = kafka.bootstrap
    create_topic(bs, topic)
    produce(bs, topic, 6000, size=300)
    produce_txn(bs, topic, f"tx-{topic}", 300, commit=False)
    produce_txn(bs, topic, f"tx-{topic}", 300, commit=True)
    produce(bs, topic, 6000, size=300)
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir).segments) >= 4)
    before = {
        iso: _read(bs, topic, iso, until=_watermarks(bs, topic)[1])
        for iso in ("read_uncommitted", "read_committed")
    }
    d = Daemon(_config(kafka, topic, tmp, "daemon"), once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()
    fetcher = RemoteFetcher.from_config(_config(kafka, topic, tmp, "reader"))
    try:
        wait_for("remote metadata visible", lambda: topic in fetcher.topics())
        remote_end = fetcher.plan(topic, 0).log_end
        assert remote_end > 2000
        admin = AdminClient({"bootstrap.servers": bs})
        futs = admin.delete_records([TopicPartition(topic, 0, remote_end)])
        for f in futs.values():
            f.result(30)
        wait_for(
            "local segments deleted",
            lambda: min(s.base_offset for s in PartitionDir(pdir).segments) >= remote_end - 5000,
        )
        assert _watermarks(bs, topic)[0] == remote_end  # the broker alone cannot serve 0..remote_end
        yield Tiered(topic, bs, fetcher, before, remote_end, tmp)
    finally:
        fetcher.close()


def _watermarks(bs: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "wm"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_deleted_history_through_endpoint(tiered: Tiered, isolation: str) -> None:
    with EndpointThread(tiered.fetcher, ListenerSettings(port=0, merged=False), tiered.tmp / "ep1") as ep:
        got = _read(ep.bootstrap, tiered.topic, isolation, until=tiered.remote_end)
    assert got == [r for r in tiered.before[isolation] if r[0] < tiered.remote_end]


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_merged_mode_reads_history_and_live_tail(tiered: Tiered, isolation: str) -> None:
    tail_keys = [f"tail-{isolation}-{i}".encode() for i in range(3000)]
    stop = threading.Event()

    def keep_producing() -> None:
        p = Producer({"bootstrap.servers": tiered.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i, k in enumerate(tail_keys):
            p.produce(tiered.topic, key=k, value=b"L" * 100, partition=0)
            if i % 100 == 0:
                p.poll(0)
                if stop.wait(0.01):
                    break
        p.flush(60)

    with EndpointThread(tiered.fetcher, ListenerSettings(port=0, merged=True), tiered.tmp / isolation) as ep:
        producer = threading.Thread(target=keep_producing)
        producer.start()
        try:
            got = _read(ep.bootstrap, tiered.topic, isolation, keys=set(tail_keys))
        finally:
            stop.set()
            producer.join()
        # ListOffsets through the endpoint: earliest is the remote start, latest the broker's end
        assert _watermarks(ep.bootstrap, tiered.topic) == (0, _watermarks(tiered.bootstrap, tiered.topic)[1])
    before = tiered.before[isolation]
    assert got[: len(before)] == before  # remote history, then the broker's local part
    rest = [k or b"" for _, k, _ in got[len(before) :]]  # earlier tests' tails, then this one's
    assert all(k.startswith(b"tail-") for k in rest)
    assert rest[-len(tail_keys) :] == tail_keys  # the live tail, in order
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
