"""``rlm serve`` starts what the installed extras allow and names what is missing.

A missing extra is simulated the way Python sees one: the extra's top-level modules are set to
``None`` in ``sys.modules`` before ``rlm.cli`` runs, so importing them raises ImportError.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from tests.daemon.helpers import wait_for
from tests.kafka_endpoint.conftest import TOPIC, Served

HIDE = ("import sys; [sys.modules.__setitem__(m, None) for m in sys.argv[1].split(',') if m]; "
        "from rlm.cli import main; sys.exit(main(sys.argv[2:]))")
HTTP_EXTRA = "starlette,uvicorn"
KAFKA_EXTRA = "kio"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cfg(served: Served) -> Path:
    cfg = served.work / "serve-extras.yaml"
    cfg.write_text(yaml.safe_dump({"work_dir": str(served.work / "work"), "log_format": "json"}))
    return cfg


def _serve(hidden: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HIDE, hidden, "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    assert proc.stderr is not None
    return rc, proc.stderr.read()


def test_without_http_extra_the_kafka_endpoint_still_serves(served: Served) -> None:
    proc = _serve(HTTP_EXTRA, "--config", str(_cfg(served)), "--kafka-listener", "127.0.0.1:0")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("kafka endpoint listening on "), line
        c = Consumer({"bootstrap.servers": line.split()[-1], "group.id": "extras",
                      "enable.auto.commit": False})
        try:
            low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 1), timeout=30)
        finally:
            c.close()
        assert (low, high) == (0, served.expected.log_end[1])
    finally:
        rc, err = _stop(proc)
    assert rc == 0
    assert "rlm serve: not started: the read HTTP API needs the 'http' extra" in err


def test_without_kafka_extra_http_serves_and_the_listener_is_named_missing(served: Served) -> None:
    port = _free_port()
    proc = _serve(KAFKA_EXTRA, "--config", str(_cfg(served)), "--port", str(port),
                  "--kafka-listener", "127.0.0.1:0")

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"rlm serve exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                return bool(json.loads(r.read())["status"] == "ok")
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        wait_for("rlm serve healthy", healthy, timeout=60)
    finally:
        rc, err = _stop(proc)
    assert rc == 0
    assert "rlm serve: not started: the Kafka-protocol endpoint needs the 'kafka' extra" in err


@pytest.mark.parametrize(("hidden", "args", "named"), [
    (HTTP_EXTRA, (), ["'http' extra"]),
    (f"{HTTP_EXTRA},{KAFKA_EXTRA}", ("--kafka-listener", "127.0.0.1:0"), ["'http' extra", "'kafka' extra"]),
])
def test_nothing_can_start_exits_3_naming_every_extra(served: Served, hidden: str, args: tuple[str, ...],
                                                      named: list[str]) -> None:
    proc = _serve(hidden, "--config", str(_cfg(served)), "--port", "0", *args)
    rc = proc.wait(60)  # exits by itself
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert rc == 3, err
    assert err.startswith("rlm: error: ") and all(n in err for n in named)
