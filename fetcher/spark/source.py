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

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
)

from fetcher.spark.batch import TieredPartition, TieredReader
from fetcher.spark.options import parse_options
from fetcher.spark.planner import PushedBounds
from fetcher.spark.schema import check_user_schema, spark_schema
from fetcher.spark.stream import TieredStreamReader

__all__ = ["KafkaTieredPushdownSource", "KafkaTieredSource", "TieredPartition", "TieredReader"]

NAME = "kafka-tiered"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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
        opts = parse_options(self.options)
        check_user_schema(schema)
        cls = PushdownReader if self.pushdown else TieredReader
        return cls(opts, schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        """``spark.readStream.format("kafka-tiered")``: newly tiered segments as micro-batches."""
        opts = parse_options(self.options)
        check_user_schema(schema)
        return TieredStreamReader(opts, schema)


class KafkaTieredPushdownSource(KafkaTieredSource):
    """The same source, taking offset/timestamp/topic/partition filters from Spark."""

    pushdown = True


class PushdownReader(TieredReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take the filters on offset, timestamp, topic and partition; yield back the rest."""
        for f in filters:
            bounds = _accept(f, self.pushed)
            if bounds is None:
                yield f
            else:
                self.pushed = bounds


def _us(value: Any) -> int | None:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int((value - _EPOCH) // dt.timedelta(microseconds=1))
    return None


def _narrow(lo: int | None, hi: int | None, new_lo: int | None, new_hi: int | None) -> tuple[Any, Any]:
    if new_lo is not None:
        lo = new_lo if lo is None else max(lo, new_lo)
    if new_hi is not None:
        hi = new_hi if hi is None else min(hi, new_hi)
    return lo, hi


def _accept(f: Filter, b: PushedBounds) -> PushedBounds | None:
    """``b`` narrowed by ``f`` when it can be enforced exactly, else ``None``."""
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    attr: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attr) != 1:
        return None
    col = attr[0].lower()
    value = getattr(f, "value", None)
    if col in ("topic", "partition"):
        if isinstance(f, EqualTo):
            values = [value]
        elif isinstance(f, In):
            values = list(value or ())
        else:
            return None
        kind = str if col == "topic" else int
        if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
            return None
        current = b.topics if col == "topic" else b.partitions
        new = frozenset(values) if current is None else current & frozenset(values)
        return replace(b, topics=new) if col == "topic" else replace(b, partitions=new)  # type: ignore[arg-type]
    if col == "offset":
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        rng = {EqualTo: (value, value + 1), GreaterThan: (value + 1, None), GreaterThanOrEqual: (value, None),
               LessThan: (None, value), LessThanOrEqual: (None, value + 1)}.get(type(f))
        if rng is None:
            return None
        lo, hi = _narrow(b.offset_lo, b.offset_hi, *rng)
        return replace(b, offset_lo=lo, offset_hi=hi)
    if col == "timestamp":
        us = _us(value)
        if us is None:
            return None
        rng = {EqualTo: (us, us), GreaterThan: (us + 1, None), GreaterThanOrEqual: (us, None),
               LessThan: (None, us - 1), LessThanOrEqual: (None, us)}.get(type(f))
        if rng is None:
            return None
        lo, hi = _narrow(b.ts_lo_us, b.ts_hi_us, *rng)
        return replace(b, ts_lo_us=lo, ts_hi_us=hi)
    return None
