"""Driver of the SQL auto-registration test: a fresh process, no ``fetcher.spark.register`` call.

Reads ``kafka-tiered`` through the DataFrame API and through ``CREATE TEMPORARY VIEW ... USING``,
then tries a view with a misspelt option, and prints one JSON line with the counts and the error.
Run on the test venv's editable install (``make install``), nothing on PYTHONPATH, as a developer's
environment has it; the wheel's registration is the cluster tests' part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--topic", required=True)
    a = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[1]").appName("kafka-tiered-sql")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        df_count = (spark.read.format("kafka-tiered").option("rlm.config", a.config)
                    .option("subscribe", a.topic).load().count())
        spark.sql(f"CREATE TEMPORARY VIEW v USING `kafka-tiered` "
                  f"OPTIONS (`rlm.config` '{a.config}', subscribe '{a.topic}')")
        sql_count = spark.sql("SELECT count(*) AS n FROM v").collect()[0]["n"]
        try:
            spark.sql(f"CREATE TEMPORARY VIEW bad USING `kafka-tiered` "
                      f"OPTIONS (`rlm.config` '{a.config}', subscrbe '{a.topic}')")
            spark.sql("SELECT count(*) FROM bad").collect()
            typo_error = None
        except Exception as e:
            typo_error = str(e)
        print(json.dumps({"dataframe": df_count, "sql": sql_count, "typo_error": typo_error}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
