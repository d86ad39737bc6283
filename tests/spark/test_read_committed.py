"""``kafka-tiered`` read_committed equals the broker's read_committed answer.

A real broker writes: an aborted transaction whose records are in one segment and whose ABORT
marker is two segments later (a Spark task carries only its own segment, so the driver must
collect the aborts over the whole plan), and a committed transaction that starts in the last
tiered segment and commits in the next, untiered one (the tiering frontier: decided from the
broker's log dir). Spark must return exactly what a read_committed consumer of the broker got.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import fetcher.spark
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from tests.daemon.helpers import create_topic, produce, transactional_producer
from tests.fetcher_e2e.conftest import consume_all, lso_of
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _segments(pdir: Path) -> int:
    return len(PartitionDir(pdir).segments)


def test_spark_read_committed_equals_the_broker(kafka: KafkaCluster, spark: Any, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    topic = f"spark-rc-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)  # 1 MiB segments
    pdir = kafka.log_dir / f"{topic}-0"
    aborted = transactional_producer(bs, f"{topic}-a")
    aborted.begin_transaction()
    for i in range(300):
        aborted.produce(topic, key=f"a{i}".encode(), value=b"a" * 300, partition=0)
    aborted.flush(30)
    while _segments(pdir) < 3:  # two rolls between the aborted records and their marker
        produce(bs, topic, 1000, size=300)
    aborted.abort_transaction(30)
    committed = transactional_producer(bs, f"{topic}-c")
    committed.begin_transaction()
    rolled = _segments(pdir)
    while _segments(pdir) == rolled:  # the committed transaction spans the next roll
        for i in range(200):
            committed.produce(topic, key=f"c{i}".encode(), value=b"c" * 300, partition=0)
        committed.flush(30)
    committed.commit_transaction(30)
    produce(bs, topic, 20, size=300)
    lso = lso_of(bs, topic)
    want = [(o, k, v) for o, _tt, _ts, k, v, _h in consume_all(bs, topic, "read_committed", lso)]

    settings = {
        "log_dirs": [str(kafka.log_dir)],
        "work_dir": str(tmp_path / "work"),
        "bootstrap_servers": bs,
        "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote"), "fsync": False}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp_path / "metadata")}},
        "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1}],
        "http": {"enabled": False},
    }
    d = Daemon(load_config(None, **settings), once=True).start()
    assert d.run_once() == 0
    d.stop()
    remote_end = PartitionDir(pdir).segments[-1].base_offset
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({**settings, "work_dir": str(tmp_path / "reader")}))

    fetcher.spark.register(spark)
    rows = (spark.read.format("kafka-tiered").option("rlm.config", str(cfg)).option("subscribe", topic)
            .option("kafka.isolation.level", "read_committed").option("rlm.splitBytes", str(256 * 1024))
            .load().select("offset", "key", "value").orderBy("offset").collect())
    got = [(r.offset, bytes(r.key) if r.key is not None else None, bytes(r.value)) for r in rows]
    expected = [w for w in want if w[0] < remote_end]
    assert not [k for _o, k, _v in got if k is not None and k.startswith(b"a")], "aborted records read"
    assert any(k is not None and k.startswith(b"c") for _o, k, _v in got), "the frontier's commit decided"
    assert got == expected
