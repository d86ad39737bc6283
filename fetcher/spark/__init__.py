"""The Spark face of the read core: the ``kafka-tiered`` Python Data Source (pyspark >= 4.0).

An installed package (wheel or editable) registers itself in every session through the top-level
module ``pyspark_kafka_tiered`` (a file at the repo root); ``fetcher.spark.register(spark)`` does
it by hand (filter pushdown). Then ``spark.read.format("kafka-tiered")``
or ``CREATE TEMPORARY VIEW v USING `kafka-tiered` OPTIONS (...)``. Modules: :mod:`.options`
(Spark Kafka option names), :mod:`.planner` (driver planning on the read core),
:mod:`.executor` (task reads), :mod:`.schema` (Spark's exact Arrow schema), :mod:`.source`.
"""

from __future__ import annotations

from typing import Any

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> type:
    """Register ``kafka-tiered`` with ``spark``; returns the registered class.

    Filter pushdown is used when ``spark.sql.python.filterPushdown.enabled`` is true at the time
    of the call (Spark rejects a pushdown reader otherwise): call again after changing the conf.
    """
    from fetcher.spark.source import KafkaTieredPushdownSource, KafkaTieredSource

    enabled = str(spark.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"
    cls = KafkaTieredPushdownSource if enabled else KafkaTieredSource
    spark.dataSource.register(cls)
    return cls


__all__ = ["PUSHDOWN_CONF", "register"]
