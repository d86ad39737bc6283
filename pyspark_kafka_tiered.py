"""The top-level module ``pyspark_kafka_tiered``: ``kafka-tiered`` registered with no Python glue.

PySpark >= 4.0 registers, in every new session, the ``DefaultSource`` of each importable
top-level module named ``pyspark_*`` (``pyspark/sql/worker/lookup_data_sources.py``), so
``spark.read.format("kafka-tiered")`` and ``CREATE TEMPORARY VIEW ... USING `kafka-tiered```
work without a :func:`fetcher.spark.register` call — in ``spark-sql``, the Thrift server and
SQL notebooks too. The plain source is the one registered this way: Spark refuses a reader that
takes filters unless ``spark.sql.python.filterPushdown.enabled`` is on, which a module imported
before any session exists cannot know; ``register(spark)`` still switches to pushdown.

A module file at the repo root (``py-modules`` in pyproject.toml), not a package mapped from
``fetcher/spark``: with ``package-dir = {"" = "."}`` setuptools' editable install is a static
``.pth`` that ``pkgutil`` sees, so a wheel and ``pip install -e`` both register the source.
"""

from __future__ import annotations

from fetcher.spark.source import KafkaTieredSource as DefaultSource

__all__ = ["DefaultSource"]
