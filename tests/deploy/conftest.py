"""Fixtures for the deploy/ checks: the files under test, external checkers, and a live daemon to scrape.

Checkers that are not Python packages (``promtool`` from Debian's ``prometheus`` package,
``systemd-analyze`` from ``systemd``) are installed here when missing, as ``deploy/local/fetch-jars.sh``
installs Maven: with apt-get, as root. That keeps CI on a fresh Debian machine self-sufficient.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rlm.log.checkpoints import MetaProperties
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, TopicPartition
from tests.daemon.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def apt_install_tool(tool: str, package: str) -> str | None:
    """Path of ``tool``; installs Debian ``package`` first when it is missing and we may (root + apt-get)."""
    found = shutil.which(tool)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # --no-install-recommends: promtool only, no exporters; the package's service is not started in
    # containers (policy-rc.d) and is harmless on a full system (it binds its own port, not ours).
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
        check=True,
        env=env,
        capture_output=True,
        timeout=900,
    )
    return shutil.which(tool)


@pytest.fixture(scope="session")
def promtool() -> str:
    path = apt_install_tool("promtool", "prometheus")
    if path is None:
        pytest.fail("promtool is missing and cannot be installed (needs root and apt-get)")
    return path


def load_yaml_docs(path: Path) -> list[dict[str, object]]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


@dataclass(frozen=True)
class LiveDaemon:
    """A running ``rlm run`` (standalone, real files) and what its HTTP endpoint answered."""

    port: int
    metrics_text: str

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)


def _write_partition(log_dir: Path, topic: str, batches: int) -> None:
    w = PartitionWriter(
        log_dir / f"{topic}-0", topic_id=KafkaUuid.random(), config=WriterConfig(segment_bytes=32 * 1024)
    )
    for b in range(batches):
        w.append([(f"k{b}-{i}".encode(), b"v" * 90) for i in range(20)], producer_id=7, producer_epoch=0)
    w.close()
    write_log_dir_files(
        log_dir,
        [(TopicPartition(topic, 0), w.log_end_offset)],
        meta=MetaProperties(1, "deploy-cluster-0001", 1),
    )


@pytest.fixture(scope="session")
def live_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    """``rlm run`` as a real process on a small generated log dir, scraped once every segment is copied.

    Per-partition series exist only once a partition was worked, so the scrape waits until the daemon
    has copied the partition; families without samples still appear in ``# TYPE`` lines.
    """
    tmp = tmp_path_factory.mktemp("live-daemon")
    logs = tmp / "logs"
    _write_partition(logs, "scrape", 120)
    cfg = tmp / "rlm.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(logs)],
                "work_dir": str(tmp / "work"),
                "http": {"port": 0},
                "task_interval_ms": 200,
                "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    status_file = tmp / "work" / "status.json"

    def copied() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"rlm run exited {proc.returncode}: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        if not status_file.exists():
            return False
        st = json.loads(status_file.read_text())
        return bool(st.get("http_port")) and st["partitions"].get("scrape-0", {}).get("remote_end", -1) > 0

    try:
        wait_for("daemon copied the partition", copied, timeout=90)
        port = int(json.loads(status_file.read_text())["http_port"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        yield LiveDaemon(port, text)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@dataclass(frozen=True)
class LiveServe:
    """A running ``rlm serve`` over a standalone tiered log dir, scraped after one real record read."""

    port: int
    metrics_text: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def live_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServe]:
    """``rlm serve`` as a real process reading what ``rlm run --once`` tiered (local plugin, file store).

    The request-latency histogram is labelled per route and status, so a record read (a remote GET
    through the reader pool) is made before the scrape to give it samples.
    """
    from tests.daemon.test_standalone import cfg_for, run_once

    tmp = tmp_path_factory.mktemp("live-serve")
    logs = tmp / "logs"
    _write_partition(logs, "scrape", 120)
    run_once(cfg_for(logs, tmp / "tier"))
    cfg = tmp / "serve.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "work_dir": str(tmp / "work"),
                "storage": {"plugin": "local", "config": {"root": str(tmp / "tier" / "remote")}},
                "metadata": {"manager": "file", "config": {"dir": str(tmp / "tier" / "metadata")}},
            }
        )
    )
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "serve", "--config", str(cfg), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"rlm serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                return bool(json.loads(r.read())["status"] == "ok")
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        wait_for("rlm serve healthy", healthy, timeout=60)
        records = base + "/v1/topics/scrape/partitions/0/records?offset=3"
        with urllib.request.urlopen(records, timeout=30) as r:
            assert r.status == 200 and r.read().startswith(b'{"offset":3,')
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            text = r.read().decode()
        yield LiveServe(port, text)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def exported_names(metrics_text: str) -> set[str]:
    """Every series name the scrape shows: sample names, plus the names declared by ``# TYPE`` lines
    (with a histogram's ``_bucket``/``_sum``/``_count``), since a labelled family with no child yet
    exports only its header."""
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    for fam in text_string_to_metric_families(metrics_text):
        names.update(s.name for s in fam.samples)
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}{sfx}" for sfx in ("_bucket", "_sum", "_count"))
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
    return names
