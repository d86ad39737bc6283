"""Run by test_spark_source in its own process: Spark's built-in Kafka source (spark-sql-kafka-0-10)
reads a topic through the endpoint; prints one JSON line per row. A separate process because the
connector jars must be on the JVM's classpath from its start (the test session's Spark has none)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

from tests.fixtures.spark import start_local_spark, stop_local_spark


def main() -> None:
    bootstrap, topic, isolation, jars, scratch = sys.argv[1:6]
    spark = start_local_spark(Path(scratch), app_name="spark-kafka-source",
                              extra_conf={"spark.jars": jars})
    try:
        df = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("endingOffsets", "latest")
              .option("kafka.isolation.level", isolation)
              .load())
        for row in df.select("partition", "offset", "key", "value").orderBy("partition", "offset").collect():
            print(json.dumps([row.partition, row.offset,
                              None if row.key is None else base64.b64encode(row.key).decode(),
                              None if row.value is None else base64.b64encode(row.value).decode()]))
    finally:
        stop_local_spark(spark)


if __name__ == "__main__":
    main()
