"""``kafka-tiered`` over adopted history (issue 25): ``rlm restore --adopt-into`` writes the old
history into a new store under a new topic id and name, pointing at the old objects; Spark reads it
as a consumer of the Kafka endpoint does. Here (not beside the other adoption tests) so that it runs
after the other Spark modules, on warm Python workers: a cold first query costs about a minute on a
loaded two-core machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from fetcher.spark import register as register_kafka_tiered
from rlm.cli import main
from rlm.config import load_config
from tests.daemon.test_restore_adopt import adopt_target
from tests.daemon.test_restore_broker import reads
from tests.fetcher._tiered import tier
from tests.spark.helpers import spark_ms

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def spark_rows(spark: Any, cfg: Path, topic: str, end: int, isolation: str) -> list[Any]:
    """The records of ``[0, end)`` ``kafka-tiered`` reads, as a consumer's rows (offset, key, value,
    ms, headers)."""
    df = (spark.read.format("kafka-tiered").option("rlm.config", str(cfg)).option("subscribe", topic)
          .option("endingOffsets", json.dumps({topic: {"0": end}})).option("includeHeaders", "true")
          .option("kafka.isolation.level", isolation).load())
    rows = [(r.offset, r.key, r.value, spark_ms(r.timestamp),
             [(h.key, h.value) for h in r.headers or []] or None) for r in df.collect()]
    return sorted(rows, key=lambda r: r[0])


def test_spark_reads_the_adopted_history_like_the_endpoint(
        tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Spark's ``kafka-tiered`` source over adopted history (the new topic id and name, objects of
    the old ones) reads the rows a consumer of the Kafka endpoint reads (``read_committed``: an
    aborted transaction is left out by both)."""
    tiered = tier(tmp_path / "src")
    (tiered.work / "rlm.yaml").write_text(json.dumps({
        "log_dirs": [str(tiered.logs)], "work_dir": str(tiered.work), "http": {"enabled": False}}))
    new_cfg, new_id, _ = adopt_target(tmp_path, tiered.work / "remote", "sparked")
    capsys.readouterr()
    assert main(["restore", "--config", str(tiered.work / "rlm.yaml"), "--topic", tiered.tip.topic,
                 "--to-topic", "sparked", "--log-dir", str(tmp_path / "b-logs"), "--adopt-into",
                 str(new_cfg), "--execute", "--json"]) == 0
    (done,) = json.loads(capsys.readouterr().out)["adopted"]
    assert done["topic_id"] == new_id.text
    end = tiered.tiered_segments()[2].base_offset  # two segments: two Spark tasks (seconds each)
    with RemoteFetcher.from_config(load_config(new_cfg)) as reader:
        endpoint = EndpointThread(reader, ListenerSettings(port=0), tmp_path / "endpoint")
        try:
            served = reads(endpoint.bootstrap, "sparked", 0, end)  # both isolation levels
        finally:
            endpoint.close()
    assert len(served["read_uncommitted"]) > len(served["read_committed"]) > 100  # an aborted txn
    register_kafka_tiered(spark)  # one query (each costs seconds): read_committed, the harder one
    assert spark_rows(spark, new_cfg, "sparked", end, "read_committed") == served["read_committed"]
