"""``rlm serve`` and ``rlm run`` with ``read.serve_http`` as processes: they serve the API on the
configured port, and SIGTERM stops them cleanly (exit status 0)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.daemon.test_standalone import write_partition
from tests.fetcher_http.conftest import TOPIC, Tiered

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)


def wait_json(url: str, ok: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            r = requests.get(url, timeout=5)
            if r.status_code == 200 and ok(r.json()):
                return r.json()
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered as expected:\n{log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def test_rlm_serve(tiered: Tiered, tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "work_dir": str(tmp_path / "work"),
        "storage": {"plugin": "local", "config": {"root": str(tiered.work / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tiered.work / "metadata")}},
    }))
    log = tmp_path / "serve.log"
    proc = start(["serve", "--config", str(cfg), "--port", str(port)], log)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_json(base + "/health", lambda b: b["status"] == "ok", proc, log)
        assert requests.get(base + "/v1/topics", timeout=10).json()["topics"][0]["topic"] == TOPIC
        r = requests.get(base + f"/v1/topics/{TOPIC}/partitions/0/records", params={"offset": 3}, timeout=10)
        assert r.status_code == 200 and r.text.startswith('{"offset":3,')
    finally:
        assert stop(proc) == 0, log.read_text()


def test_rlm_run_serves_the_read_api_when_enabled(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "live", 0, 80)
    port = free_port()
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "log_dirs": [str(logs)], "work_dir": str(tmp_path / "work"), "task_interval_ms": 200,
        "http": {"enabled": False},
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
        "read": {"serve_http": True, "http_port": port},
    }))
    log = tmp_path / "run.log"
    proc = start(["run", "--config", str(cfg)], log)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_json(base + "/v1/topics", lambda b: [t["topic"] for t in b["topics"]] == ["live"], proc, log)
        plan = wait_json(base + "/v1/topics/live/partitions/0/segments",
                         lambda b: b["log_end_offset"] > 1000, proc, log)
        r = requests.get(base + "/v1/topics/live/partitions/0/records",
                         params={"offset": plan["log_end_offset"] - 1}, timeout=10)
        assert r.status_code == 200
    finally:
        assert stop(proc) == 0, log.read_text()
