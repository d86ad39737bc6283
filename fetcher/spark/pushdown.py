"""Filter pushdown of ``kafka-tiered``: the reader that takes Spark's filters it can enforce exactly.

Apart from :mod:`fetcher.spark.source` (imported by PySpark's lookup and schema workers, kept
light) because it needs the reader, hence the read core. Spark refuses a reader that implements
``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is true (see the source).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import Filter

from fetcher.spark.batch import TieredReader
from fetcher.spark.planner import PushedBounds

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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
