"""``rlm kafka-serve``: starts on the configured work dir, answers a consumer, exits 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from tests.kafka_endpoint.conftest import TOPIC, Served


@pytest.mark.parametrize("command", [["kafka-serve", "--listener"],
                                     ["serve", "--port", "0", "--kafka-listener"]])
def test_kafka_serve_command(served: Served, command: list[str]) -> None:
    cfg = served.work / "serve.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(served.work / "logs")],
                "work_dir": str(served.work / "work"),
                "log_format": "json",
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", command[0], "--config", str(cfg), *command[1:], "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        bootstrap = ""
        for line in proc.stdout:
            if line.startswith("kafka endpoint listening on "):
                bootstrap = line.split()[-1]
                break
        assert bootstrap, "the command never said where it listens"
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cmd", "enable.auto.commit": False})
        try:
            low, high = c.get_watermark_offsets(TopicPartition(TOPIC, 1), timeout=30)
        finally:
            c.close()
        assert (low, high) == (0, served.expected.log_end[1])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
