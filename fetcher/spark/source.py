"""The ``kafka-tiered`` Python Data Source (pyspark >= 4.0): Spark's Kafka source over remote storage.

Life of a query (see docs/spark.md): ``schema()``/``reader()`` run in a driver-side Python worker
and validate every option (a mistake fails ``load()``); the reader is pickled *before*
``partitions()`` runs, so it carries only the parsed options, the configured storage plugin and
the filters it accepted; ``partitions()`` plans with the read core; each task's ``read()`` decodes
its range on an executor and yields Arrow batches of exactly Spark's schema.

Filter pushdown: Spark refuses a reader that implements ``pushFilters`` unless
``spark.sql.python.filterPushdown.enabled`` is true, so :func:`fetcher.spark.register` picks
:class:`KafkaTieredPushdownSource` when the conf is on and :class:`KafkaTieredSource` otherwise.
Every accepted filter is enforced exactly (Spark drops it from its own plan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from fetcher.spark.options import parse_options
from fetcher.spark.schema import check_user_schema, spark_schema

if TYPE_CHECKING:
    from fetcher.spark.batch import TieredPartition, TieredReader

__all__ = ["KafkaTieredPushdownSource", "KafkaTieredSource", "TieredPartition", "TieredReader"]

NAME = "kafka-tiered"


class KafkaTieredSource(DataSource):
    """``spark.read.format("kafka-tiered")``: Kafka records read from tiered segments."""

    pushdown = False

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        opts = parse_options(self.options)
        return spark_schema(opts.include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        from fetcher.spark.batch import TieredReader
        from fetcher.spark.pushdown import PushdownReader

        opts = parse_options(self.options)
        check_user_schema(schema)
        cls = PushdownReader if self.pushdown else TieredReader
        return cls(opts, schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """``spark.readStream.format("kafka-tiered")``: newly tiered segments as micro-batches."""
        from fetcher.spark.stream import TieredStreamReader

        opts = parse_options(self.options)
        check_user_schema(schema)
        return TieredStreamReader(opts, schema)


class KafkaTieredPushdownSource(KafkaTieredSource):
    """The same source, taking offset/timestamp/topic/partition filters from Spark."""

    pushdown = True


def __getattr__(name: str) -> Any:
    """``TieredPartition``/``TieredReader`` load on first use: this module is what PySpark's lookup
    and schema workers import, and they must not pay for the read path (see :mod:`fetcher`)."""
    if name in ("TieredPartition", "TieredReader"):
        from fetcher.spark import batch

        return getattr(batch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
