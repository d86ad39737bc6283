"""Outages are visible while they last (issue 10, item 1): a real SeaweedFS, and in the second test
a real Kafka broker holding the metadata topic, each of the test's own, frozen with SIGSTOP and
thawed with SIGCONT.

A frozen server still accepts TCP connections (the kernel does) and never answers: the case
where a client without per-request timeouts hangs and nothing looks wrong. The test polls the
daemon's ``/health``, ``/ready`` and ``/metrics`` and the status file, and asserts on the states it
observes (degraded, not ready, dependency down, a copy in flight, the error in ``rlm status``,
then recovery and catch-up); it prints how long each took but asserts no durations.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.commands.status import render_table
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.daemon.status import read_status
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, s3_storage, topic_rlmm, wait_for
from tests.daemon.test_standalone import write_partition
from tests.services.kafka import KafkaCluster
from tests.services.s3 import SeaweedFS

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


@pytest.fixture
def own_seaweedfs() -> Iterator[SeaweedFS]:
    server = SeaweedFS(name="seaweedfs-outage").start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGCONT)
        server.stop()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_frozen_storage_is_visible_then_recovers(
    kafka: Any, own_seaweedfs: SeaweedFS, unique_topic: str, tmp_path: Path
) -> None:
    sw = own_seaweedfs
    bucket = sw.create_bucket("outage")
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 8000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 2)
    pdir = PartitionDir(pdir_path)
    tip = TopicIdPartition(pdir.topic_id, unique_topic, 0)
    storage = s3_storage(sw, bucket)
    for k in ("connect_timeout", "read_timeout"):  # the daemon's per-request timeout applies instead
        storage["config"].pop(k)
    cfg = load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp_path / "work"),
        bootstrap_servers=bs,
        storage=storage,
        topics=[{"pattern": unique_topic, "remote.storage.enable": True}],
        task_interval_ms=200,
        retry_backoff_ms=200,
        retry_backoff_max_ms=1000,
        storage_request_timeout_ms=1500,
        health_check_interval_ms=300,
        http={"port": 0},
    )
    d = Daemon(cfg).start()
    assert d.http is not None and d.ctx is not None
    port, rlmm = d.http.port, d.ctx.rlmm
    try:
        want = [s.base_offset for s in PartitionDir(pdir_path).inactive_segments()]
        wait_for(
            "first segments tiered",
            lambda: [m.start_offset for m in finished(rlmm, tip)][: len(want)] == want,
        )
        wait_for("ready", lambda: get(port, "/ready")[0] == 200)
        assert json.loads(get(port, "/health")[1])["status"] == "ok"

        os.killpg(sw.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        frozen = time.monotonic()
        produce(bs, unique_topic, 8000)  # more rolled segments: copies start against the frozen store
        seen: dict[str, float] = {}

        def observe() -> bool:
            code, body = get(port, "/ready")
            if code == 503 and "storage" in json.loads(body)["problems"]:
                seen.setdefault("ready_503", time.monotonic() - frozen)
            health_code, health = get(port, "/health")
            if health_code == 200 and json.loads(health).get("status") == "degraded":
                seen.setdefault("health_degraded", time.monotonic() - frozen)
            text = get(port, "/metrics")[1]
            if metric(text, 'rlm_dependency_up{dependency="storage"}') == 0.0:
                seen.setdefault("storage_down_metric", time.monotonic() - frozen)
            if (metric(text, 'rlm_errors_total{kind="ProbeTimeoutError",task="health_storage"}') or 0) > 0:
                seen.setdefault("errors_total", time.monotonic() - frozen)
            if (metric(text, "rlm_remote_copy_in_flight_oldest_age_seconds") or 0) > 0:
                seen.setdefault("copy_in_flight", time.monotonic() - frozen)
            st = read_status(tmp_path / "work")
            if "storage" in st.problems and "ERROR storage" in render_table(st):
                seen.setdefault("rlm_status_error", time.monotonic() - frozen)
            return len(seen) == 6

        wait_for("the outage visible everywhere", observe, timeout=120, interval=0.1)
        print("visible after (s):", {k: round(v, 2) for k, v in seen.items()})
        assert d.scheduler.keys() == {tip}, "the partition stays scheduled while storage is down"

        os.killpg(sw.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        thawed = time.monotonic()
        wait_for("ready again", lambda: get(port, "/ready")[0] == 200, timeout=120)
        print(f"ready again after {time.monotonic() - thawed:.2f}s")
        assert json.loads(get(port, "/health")[1])["status"] == "ok"
        assert metric(get(port, "/metrics")[1], 'rlm_dependency_up{dependency="storage"}') == 1.0
        want = [s.base_offset for s in PartitionDir(pdir_path).inactive_segments()]
        wait_for(
            "caught up after the outage",
            lambda: [m.start_offset for m in finished(rlmm, tip)][: len(want)] == want,
            timeout=180,
        )
        wait_for("no copy in flight", lambda: metric(
            get(port, "/metrics")[1], "rlm_remote_copy_in_flight_oldest_age_seconds") == 0.0)
        d._flush_status()
        table = render_table(read_status(tmp_path / "work"))
        assert "ERROR storage" not in table, table
    finally:
        if sw.proc is not None and sw.proc.poll() is None:
            os.killpg(sw.proc.pid, signal.SIGCONT)
        d.stop(10)


@pytest.fixture
def own_kafka() -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(nodes=1, name="kafka-meta-outage").start()
    try:
        yield cluster
    finally:
        for n in cluster._nodes:
            if n.proc is not None and n.proc.poll() is None:
                os.killpg(n.proc.pid, signal.SIGCONT)
        cluster.stop()


def test_frozen_metadata_broker_is_visible_then_recovers(own_kafka: KafkaCluster, tmp_path: Path) -> None:
    """Standalone daemon (log dirs from the writer), metadata on the topic store of a broker we freeze."""
    logs = tmp_path / "logs"
    write_partition(logs, "m", 0, 40)
    metadata = topic_rlmm(own_kafka.bootstrap, tmp_path / "work", partitions=2)
    metadata["config"]["remote.log.metadata.consume.wait.ms"] = 3000
    cfg = load_config(
        None,
        log_dirs=[str(logs)],
        work_dir=str(tmp_path / "work"),
        metadata=metadata,
        topic_defaults={"remote.storage.enable": True},
        task_interval_ms=200,
        metadata_request_timeout_ms=1500,
        health_check_interval_ms=300,
        http={"port": 0},
    )
    d = Daemon(cfg).start()
    assert d.http is not None
    port = d.http.port
    broker = own_kafka._nodes[0].proc
    assert broker is not None
    try:
        wait_for("ready", lambda: get(port, "/ready")[0] == 200)
        os.killpg(broker.pid, signal.SIGSTOP)
        frozen = time.monotonic()

        def visible() -> bool:
            code, body = get(port, "/ready")
            up = metric(get(port, "/metrics")[1], 'rlm_dependency_up{dependency="metadata"}')
            st = read_status(tmp_path / "work")
            return (
                code == 503 and "metadata" in json.loads(body)["problems"] and up == 0.0
                and "ERROR metadata" in render_table(st)
                and json.loads(get(port, "/health")[1])["status"] == "degraded"
            )

        wait_for("the metadata outage visible", visible, timeout=120, interval=0.1)
        print(f"metadata outage visible after {time.monotonic() - frozen:.2f}s")
        os.killpg(broker.pid, signal.SIGCONT)
        wait_for("ready again", lambda: get(port, "/ready")[0] == 200, timeout=120)
        assert metric(get(port, "/metrics")[1], 'rlm_dependency_up{dependency="metadata"}') == 1.0
    finally:
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGCONT)
        d.stop(10)
