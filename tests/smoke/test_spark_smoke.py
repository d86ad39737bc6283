"""Spark smoke test: a real local SparkSession runs DataFrame and Python (RDD) jobs on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest

from tests.smoke._sockets import non_loopback

pytestmark = pytest.mark.spark


def test_dataframe_count_and_group_by(spark: Any) -> None:
    assert spark.range(1000).count() == 1000

    from pyspark.sql import functions as F

    df = spark.range(1000).withColumn("bucket", F.col("id") % 10)
    agg = df.groupBy("bucket").agg(F.count("*").alias("n"), F.sum("id").alias("s"))
    rows = agg.orderBy("bucket").collect()
    assert [r["bucket"] for r in rows] == list(range(10))
    assert all(r["n"] == 100 for r in rows)
    assert [r["s"] for r in rows] == [sum(range(b, 1000, 10)) for b in range(10)]


def test_python_workers(spark: Any) -> None:
    rdd = spark.sparkContext.parallelize(range(100), 2)
    assert rdd.map(lambda x: x * 2).sum() == 9900


def test_spark_binds_loopback(spark: Any) -> None:
    from pyspark import SparkContext

    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.uiWebUrl is None
    assert spark.sparkContext.master == "local[2]"
    proc = SparkContext._gateway.proc
    assert proc is not None and proc.poll() is None
    assert non_loopback(proc.pid) == []
