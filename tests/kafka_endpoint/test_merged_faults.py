"""Merged mode when the broker goes away: a broker problem is never turned into a reset.

A broker of this module's own (it is stopped and restarted), a topic whose first segment was tiered
and then deleted locally by the broker's retention (how local data goes away beside the sidecar),
more records local only, and the merged endpoint in front. A confluent-kafka consumer reads from
offset 0 through the endpoint; the broker is stopped while the consumer is in the local part and
started again. The consumer (``auto.offset.reset=error``, so a reset cannot hide as a skip or a
re-read) must end with every record produced, exactly once, in order. A second test restarts the
broker while the endpoint is idle: its pooled broker connections are dead, and the next Fetch must
still be answered from the broker at the first try.
"""

from __future__ import annotations

import datetime
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_batches
from tests.daemon.helpers import create_topic, topic_rlmm, wait_for
from tests.kafka_endpoint.test_bad_input import _frame, _response
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
Row = tuple[int, bytes, bytes]  # offset, key, value
_GIVE_UP_S = 180  # only so a broken endpoint fails instead of hanging


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    c = KafkaCluster(nodes=1, name="kafka-merged-faults").start()
    try:
        yield c
    finally:
        c.stop()


def _config(c: KafkaCluster, topic: str, tmp: Path, work: str) -> DaemonConfig:
    return load_config(
        None,
        log_dirs=[str(c.log_dir)],
        work_dir=str(tmp / work),
        bootstrap_servers=c.bootstrap,
        storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        metadata=topic_rlmm(c.bootstrap, tmp / work),
        topics=[{"pattern": topic, "remote.storage.enable": True}],
        task_interval_ms=200,
        leadership_refresh_interval_ms=300,
        rescan_interval_ms=300,
        http={"enabled": False},
    )


def _produce(bootstrap: str, topic: str, prefix: str, n: int) -> list[Row]:
    """``n`` records; returns what the broker acknowledged (offset, key, value)."""
    acked: list[Row] = []

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((msg.offset(), msg.key(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, key=f"{prefix}{i}".encode(), value=f"{prefix}-{i}-".encode() * 60, partition=0,
                  on_delivery=done)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return sorted(acked)


def _set_retention(bootstrap: str, topic: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.bytes", value, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def _leader_ready(bootstrap: str, topic: str) -> bool:
    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5).topics.get(topic)
    except Exception:
        return False
    return md is not None and md.error is None and md.partitions[0].leader >= 0


@dataclass
class Setup:
    cluster: KafkaCluster
    topic: str
    fetcher: RemoteFetcher
    endpoint: EndpointThread
    produced: list[Row]
    remote_end: int


@pytest.fixture(scope="module")
def setup(cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("merged-faults")
    topic = f"merged-{uuid.uuid4().hex[:8]}"
    bs = cluster.bootstrap
    create_topic(bs, topic)
    produced = _produce(bs, topic, "a", 4000)
    pdir = cluster.log_dir / f"{topic}-0"
    wait_for("a segment rolled", lambda: len(PartitionDir(pdir).segments) >= 2)
    d = Daemon(_config(cluster, topic, tmp, "daemon"), once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()
    fetcher = RemoteFetcher.from_config(_config(cluster, topic, tmp, "reader"))
    try:
        wait_for("remote metadata visible", lambda: topic in fetcher.topics())
        remote_end = fetcher.plan(topic, 0).log_end
        assert remote_end == PartitionDir(pdir).segments[-1].base_offset  # every rolled segment tiered
        _set_retention(bs, topic, "1")  # the broker's (local) retention deletes the tiered segments
        wait_for("local segments deleted", lambda: PartitionDir(pdir).segments[0].base_offset == remote_end)
        _set_retention(bs, topic, "-1")
        produced += _produce(bs, topic, "b", 1500)
        endpoint = EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp / "endpoint")
        try:
            yield Setup(cluster, topic, fetcher, endpoint, produced, remote_end)
        finally:
            endpoint.close()
    finally:
        fetcher.close()


def test_broker_stopped_mid_read_then_restarted(setup: Setup) -> None:
    """The consumer neither resets nor skips: it waits out the broker and resumes."""
    c = Consumer(
        {
            "bootstrap.servers": setup.endpoint.bootstrap,
            "group.id": f"t-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # a reset is an error event, not a silent skip/re-read
            "fetch.max.bytes": 32768,
            "message.max.bytes": 32768,
            "max.partition.fetch.bytes": 16384,
            "queued.max.messages.kbytes": 64,
            "fetch.wait.max.ms": 200,
        }
    )
    got: list[Row] = []
    give_up = time.monotonic() + _GIVE_UP_S

    def poll_once() -> None:
        assert time.monotonic() < give_up, f"stuck at {got[-1:]}"
        m = c.poll(0.2)
        if m is None:
            return
        assert not m.error(), m.error()  # _AUTO_OFFSET_RESET: the endpoint said out of range
        got.append((m.offset(), m.key(), m.value()))

    node = setup.cluster.node_ids[0]
    extra: list[Row] = []
    try:
        c.assign([TopicPartition(setup.topic, 0, 0)])
        while not got or got[-1][0] < setup.remote_end + 300:  # into the broker's local part
            poll_once()
        stopper = threading.Thread(target=setup.cluster.stop_node, args=(node,))
        stopper.start()
        while stopper.is_alive():
            poll_once()
        stopper.join()
        down_polls = 0
        while down_polls < 50:  # ~10 s with the broker down: routing fails, cached state expires
            poll_once()
            down_polls += 1
        setup.cluster.start_node(node)
        wait_for("leader after restart", lambda: _leader_ready(setup.cluster.bootstrap, setup.topic))
        extra = _produce(setup.cluster.bootstrap, setup.topic, "c", 1000)  # the live tail, after restart
        last = extra[-1][0]
        while not got or got[-1][0] < last:
            poll_once()
    finally:
        c.close()
    assert got == setup.produced + extra  # every record exactly once, in order


def _fetch_request(topic: str, offset: int) -> Any:
    fetch = load_request_schema(1, 12)
    mod = __import__(fetch.__module__, fromlist=["x"])
    part = mod.FetchPartition(
        partition=0,
        fetch_offset=offset,
        partition_max_bytes=65536,
        current_leader_epoch=-1,
        last_fetched_epoch=-1,
        log_start_offset=-1,
    )
    return fetch(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=topic, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def _fetch_local(setup: Setup, offset: int) -> tuple[ErrorCode, list[int]]:
    """One Fetch v12 through the endpoint on a raw socket: (error, base offsets of the batches)."""
    with socket.create_connection(("127.0.0.1", setup.endpoint.port), timeout=60) as s:
        s.sendall(_frame(1, 12, 1, _fetch_request(setup.topic, offset)))
        _, body = _response(s, 1, 12)
    p = body.responses[0].partitions[0]
    return p.error_code, [h.base_offset for h in iter_batches(bytes(p.records or b""))]


def test_pooled_broker_connections_checked_after_a_restart(setup: Setup) -> None:
    """The endpoint's idle broker connections died with the broker; the next forwarded read
    must not fail on them."""
    offset = setup.remote_end + 10  # local only: forwarded
    err, bases = _fetch_local(setup, offset)
    assert err is ErrorCode.none and bases and bases[0] <= offset  # connections pooled now
    node = setup.cluster.node_ids[0]
    setup.cluster.stop_node(node)  # nothing reaches the endpoint meanwhile
    setup.cluster.start_node(node)
    wait_for("partition leader after restart", lambda: _leader_ready(setup.cluster.bootstrap, setup.topic))
    err, bases = _fetch_local(setup, offset)
    assert err is ErrorCode.none and bases and bases[0] <= offset
