"""``kafka-tiered`` on data a real broker wrote, tiered to SeaweedFS, then deleted from the broker.

A local SparkSession reads it row for row; then a real standalone cluster (master + 2 workers from
the pyspark wheel, 127.0.0.1) runs the same read — its tasks on both workers — and ``rlm backfill``
twice to Parquet, read back and compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

import fetcher.spark
from rlm.config import load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, produce_txn, s3_storage, transactional_producer, wait_for
from tests.services.spark_cluster import SparkCluster
from tests.spark.helpers import Row, as_tuples, expected_rows

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
HOUR = 3_600_000


def produce_with_headers(bs: str, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2, "batch.size": 16384,
                  "compression.type": "zstd" if partition else "none"})
    for i in range(n):
        headers = [("i", str(i).encode()), ("empty", None)] if i % 4 == 0 else None
        value = hashlib.sha256(f"{partition}-{i}".encode()).hexdigest().encode() * 2
        p.produce(topic, key=f"k{partition}-{i}".encode(), value=value[:100],
                  partition=partition, headers=headers)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@pytest.fixture(scope="module")
def broker_tiered(kafka: Any, seaweedfs: Any,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("broker-tiered")
    bucket = seaweedfs.create_bucket("spark")
    topic = f"spark-{time.time_ns()}"
    bs = kafka.bootstrap
    try:
        create_topic(bs, topic, partitions=2)  # 1 MiB segments
        produce_with_headers(bs, topic, 0, 12000)
        produce_txn(bs, topic, f"{topic}-c", 500, commit=True)
        aborted = transactional_producer(bs, f"{topic}-a")
        aborted.begin_transaction()
        for i in range(400):
            aborted.produce(topic, key=f"a{i}".encode(), value=b"x" * 100, partition=0)
        assert aborted.flush(30) == 0  # written to the log before the abort marker
        aborted.abort_transaction(30)
        produce_with_headers(bs, topic, 1, 30000)
        produce_with_headers(bs, topic, 0, 8000)
        time.sleep(1.0)  # let the broker go idle before its files are read
        storage = s3_storage(seaweedfs, bucket)
        cfg = load_config(None, log_dirs=[str(kafka.log_dir)], work_dir=str(root / "work"),
                          bootstrap_servers=bs, storage=storage,
                          topics=[{"pattern": topic, "remote.storage.enable": True}],
                          task_interval_ms=200, http={"enabled": False})
        d = Daemon(cfg, once=True).start()
        assert d.run_once() == 0
        d.stop()
        want = {c: sorted([r for p in (0, 1) for r in expected_rows(kafka.log_dir, topic, p, committed=c)],
                          key=lambda t: (t[3], t[4])) for c in (False, True)}
        assert len(want[False]) > len(want[True]) > 10000
        cf = root / "rlm.yaml"
        cf.write_text(yaml.safe_dump({"work_dir": str(root / "work"), "storage": storage}))
        # the broker forgets the topic: from here on only remote storage has its records
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_topics([topic])[topic].result(60)
        wait_for("local partition dirs deleted",
                 lambda: not any(kafka.log_dir.glob(f"{topic}-[01]")), timeout=120)
        yield {"config": cf, "topic": topic, "want": want, "root": root}
    finally:
        seaweedfs.delete_bucket(bucket)


def test_local_session_reads_what_the_broker_wrote(spark: Any, broker_tiered: dict[str, Any]) -> None:
    fetcher.spark.register(spark)
    t = broker_tiered
    df = (spark.read.format("kafka-tiered").option("rlm.config", str(t["config"]))
          .option("subscribe", t["topic"]).option("includeHeaders", "true").load())
    assert as_tuples(df.collect()) == t["want"][False]
    committed = (spark.read.format("kafka-tiered").option("rlm.config", str(t["config"]))
                 .option("subscribe", t["topic"]).option("includeHeaders", "true")
                 .option("kafka.isolation.level", "read_committed").load())
    assert as_tuples(committed.collect()) == t["want"][True]
    rows = t["want"][False]
    lo = rows[len(rows) // 3][5]
    want = []
    for p in (0, 1):
        mine = [r for r in rows if r[3] == p]
        first = min((r[4] for r in mine if r[5] >= lo), default=None)
        want += [r[:7] for r in mine if first is not None and r[4] >= first]
    assert want
    ranged = (spark.read.format("kafka-tiered").option("rlm.config", str(t["config"]))
              .option("subscribe", t["topic"]).option("startingTimestamp", str(lo))
              .option("startingOffsetsByTimestampStrategy", "latest").load())
    assert as_tuples(ranged.collect(), headers=False) == want


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable})


def _key(row: Row) -> tuple[Any, ...]:
    return (row[3], row[4])


def test_cluster_read_and_backfill(spark_cluster: SparkCluster, broker_tiered: dict[str, Any],
                                   tmp_path: Path) -> None:
    cluster, t = spark_cluster, broker_tiered
    r = _run([sys.executable, str(ROOT / "tests/spark/cluster_driver.py"), "--master", cluster.url,
              "--config", str(t["config"]), "--topic", t["topic"]])
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["workers"] == ["w1", "w2"], "the scan's tasks must run on both workers"
    assert got["tasks"] > 4
    want = t["want"][False]
    rows = sorted(got["rows"], key=lambda x: (x[0], x[1]))
    assert [(x[0], x[1], bytes.fromhex(x[2]), bytes.fromhex(x[3]), x[4]) for x in rows] == \
        [(w[3], w[4], w[0], w[1], w[5]) for w in want]
    assert [None if x[5] is None else [(k, None if v is None else bytes.fromhex(v)) for k, v in x[5]]
            for x in rows] == [w[7] for w in want]

    # rlm backfill through the cluster, twice: same output both times
    committed = t["want"][True]
    start = (min(w[5] for w in committed) // HOUR) * HOUR
    end = start + 2 * HOUR
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rlm.cli", "backfill", "--config", str(t["config"]), "--topic", t["topic"],
           "--from", str(start), "--to", str(end), "--output", str(out), "--partition-by", "hour",
           "--master", cluster.url, "--conf", "spark.executor.memory=512m",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false"]
    expect = sorted((w[3], w[4], w[1]) for w in committed if start <= w[5] < end)
    for _ in range(2):
        r = _run(cmd)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"{len(expect)} rows" in r.stdout.strip().splitlines()[-1]
        table = pq.read_table(out)
        back = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                          table.column("value").to_pylist(), strict=True))
        assert back == expect
