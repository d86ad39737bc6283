"""Spark's built-in Kafka source (``spark.read.format("kafka")``) reads tiered history through the
endpoint: exactly the records the remote tier holds, in both isolation levels."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_endpoint.conftest import PARTITIONS, TOPIC, Served
from tests.services.proc import CACHE_DIR

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def connector_jars() -> str:
    jars = sorted((CACHE_DIR / "spark-kafka" / "lib").glob("*.jar"))
    clients = sorted((CACHE_DIR / "kafka" / "lib").glob("kafka-clients-*[0-9].jar"))
    assert jars and clients, "run `bash deploy/local/fetch-jars.sh kafka spark-kafka` (make jars does)"
    return ",".join(str(p) for p in [*jars, *clients])


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_kafka_source_reads_history(served: Served, tmp_path: Path, isolation: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.kafka_endpoint.spark_kafka_driver", served.bootstrap, TOPIC, isolation,
         connector_jars(), str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    want = served.expected.committed if isolation == "read_committed" else served.expected.uncommitted
    for p in range(PARTITIONS):
        got = [(o, None if k is None else base64.b64decode(k), None if v is None else base64.b64decode(v))
               for part, o, k, v in rows if part == p]
        assert got == want[p], f"partition {p}"
