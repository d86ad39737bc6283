"""Driver program run by the cluster test (its own process: one SparkContext per process).

Reads a topic with ``kafka-tiered`` on the given master and prints one JSON line: the rows
(partition, offset, key, value, timestamp ms, headers) and the workers the scan's tasks ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession

import fetcher.spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--topic", required=True)
    a = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(a.master).appName("kafka-tiered-cluster-test")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        fetcher.spark.register(spark)
        df = (spark.read.format("kafka-tiered").option("rlm.config", a.config).option("subscribe", a.topic)
              .option("includeHeaders", "true").option("rlm.splitBytes", str(256 * 1024)).load())

        def tag(rows):  # same task as the scan: tells which worker's executor ran it
            worker = os.environ.get("RLM_TEST_WORKER", "?")
            for r in rows:
                hdrs = [[h.key, h.value.hex() if h.value is not None else None] for h in r.headers] \
                    if r.headers is not None else None
                yield (worker, r.partition, r.offset, r.key.hex(), r.value.hex(),
                       round(r.timestamp.timestamp() * 1000), hdrs)

        out = df.rdd.mapPartitions(tag).collect()
        print(json.dumps({"tasks": df.rdd.getNumPartitions(), "workers": sorted({o[0] for o in out}),
                          "rows": [o[1:] for o in out]}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
