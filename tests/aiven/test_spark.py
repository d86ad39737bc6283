"""The ``kafka-tiered`` Spark source over Aiven's layout (executors unpickle the plugin and read
the encrypted chunks themselves): every row equals what the broker's consumer read."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

import fetcher.spark
from tests.aiven.helpers import VARIANTS, expected, topics_in
from tests.fixtures.aiven.build import record_digest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _b64(data: bytes | bytearray | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("level", ["read_uncommitted", "read_committed"])
def test_spark_rows_are_what_the_brokers_consumer_read(
        spark: Any, aiven_configs: dict[str, Path], variant: str, level: str) -> None:
    fetcher.spark.register(spark)
    df = (spark.read.format("kafka-tiered").option("rlm.config", str(aiven_configs[variant]))
          .option("subscribe", ",".join(sorted(topics_in(variant)))).option("includeHeaders", "true")
          .option("kafka.isolation.level", level).option("rlm.splitBytes", str(96 * 1024)).load())
    rows = df.selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType",
                         "key", "value", "headers").collect()
    got = [{"topic": r["topic"], "partition": r["partition"], "offset": r["offset"], "timestamp": r["ts"],
            "timestamp_type": r["timestampType"] + 1,
            "digest": record_digest(_b64(r["key"]), _b64(r["value"]),
                                    [[h["key"], _b64(h["value"])] for h in r["headers"] or []])}
           for r in rows]
    want = [{k: v for k, v in r.items() if k != "leader_epoch"} for r in expected(variant, level)]
    key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
    assert len(got) == len(want)
    assert sorted(got, key=key) == sorted(want, key=key)
