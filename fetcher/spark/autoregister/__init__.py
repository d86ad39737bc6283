"""Installed a second time as the top-level module ``pyspark_kafka_tiered`` (see pyproject.toml).

PySpark >= 4.0 registers, in every new session, the ``DefaultSource`` of each importable
top-level module named ``pyspark_*`` (``pyspark/sql/worker/lookup_data_sources.py``), so
``spark.read.format("kafka-tiered")`` and ``CREATE TEMPORARY VIEW ... USING `kafka-tiered```
work without a :func:`fetcher.spark.register` call — in ``spark-sql``, the Thrift server and
SQL notebooks too. The plain source is the one registered this way: Spark refuses a reader that
takes filters unless ``spark.sql.python.filterPushdown.enabled`` is on, which a module imported
before any session exists cannot know; ``register(spark)`` still switches to pushdown.
"""

from __future__ import annotations

from fetcher.spark.source import KafkaTieredSource as DefaultSource

__all__ = ["DefaultSource"]
