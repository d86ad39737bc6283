"""Driver of the Spark SQL readback tests: a fresh process with a SparkSession of its own.

The session-wide SparkSession other tests share has no Iceberg on its classpath (and a process has
one SparkContext), so the tables ``rlm iceberg`` wrote are read here, in a separate JVM started with
the jars of ``deploy/local/iceberg-spark`` (iceberg-spark-runtime, sqlite-jdbc, the AWS SDK's s3).
Each ``--catalog NAME=JSON`` becomes ``spark.sql.catalog.NAME`` (an Iceberg ``SparkCatalog``) with
the JSON's properties; each ``--query TAG=SQL`` is run and its rows are pickled to ``--out`` as
``{TAG: [(offset, timestampType, timestamp ms, key, value, headers), ...]}`` in the order the SQL
gives, the row shape the tests compare with a read_committed consumer's records.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pickle
import sys
from typing import Any

from pyspark.sql import SparkSession


def _b(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jars", required=True, help="the folder of the Iceberg runtime jars")
    ap.add_argument("--catalog", action="append", default=[])
    ap.add_argument("--query", action="append", default=[])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    jars = sorted(glob.glob(os.path.join(a.jars, "*.jar")))
    b = (SparkSession.builder.master("local[1]").appName("iceberg-read")
         .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.memory", "640m").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.extraClassPath", ":".join(jars))
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"))
    for spec in a.catalog:
        name, props = spec.split("=", 1)
        b = b.config(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
        for k, v in json.loads(props).items():
            b = b.config(f"spark.sql.catalog.{name}.{k}", v)
    spark = b.getOrCreate()
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for spec in a.query:
            tag, sql = spec.split("=", 1)
            out[tag] = [(r["offset"], r["timestampType"], r["ms"], _b(r["key"]), _b(r["value"]),
                         tuple((h["key"], _b(h["value"])) for h in (r["headers"] or [])))
                        for r in spark.sql(sql).collect()]
        with open(a.out, "wb") as fh:
            pickle.dump(out, fh)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
