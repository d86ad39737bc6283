"""The Spark engine's partition key (``rlm.tables.spark_engine.partition_key``): rows go to
the files of their Iceberg partition whatever the session's time zone.

Iceberg's ``day``/``hour`` transforms count UTC days/hours since the epoch; the key must too. A
key formatted as a date would follow ``spark.sql.session.timeZone`` (a ``spark-submit`` job's
session need not be on UTC) and put two UTC days in one file, which PyIceberg then refuses to
register. Runs on the session's SparkSession (its time zone set for the test, then restored).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyiceberg.transforms import DayTransform, HourTransform
from pyiceberg.types import TimestamptzType

from rlm.tables.table import partition_spec

pytestmark = [pytest.mark.spark]

INSTANTS = [datetime(2026, 11, 20, 23, 30, tzinfo=UTC), datetime(2026, 11, 21, 0, 30, tzinfo=UTC),
            datetime(2026, 11, 21, 3, 59, 59, 999_999, tzinfo=UTC), datetime(2026, 11, 21, 4, 0, tzinfo=UTC),
            datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC)]


@pytest.fixture
def zone(spark: Any) -> Iterator[Any]:
    old = spark.conf.get("spark.sql.session.timeZone")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def _micros(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Kolkata", "UTC"])
def test_day_and_hour_keys_are_icebergs_utc_transforms(zone: Any, tz: str) -> None:
    from rlm.tables.spark_engine import partition_key

    spark = zone
    spark.conf.set("spark.sql.session.timeZone", tz)
    df = spark.createDataFrame([(t, "orders", 3) for t in INSTANTS],
                               "timestamp timestamp, topic string, partition int")
    day = DayTransform().transform(TimestamptzType())
    hour = HourTransform().transform(TimestamptzType())
    for by, want in ((["topic", "day"], [f"orders_{day(_micros(t))}" for t in INSTANTS]),
                     (["hour", "partition"], [f"{hour(_micros(t))}_3" for t in INSTANTS]),
                     ([], ["all"] * len(INSTANTS))):
        got = [r["k"] for r in df.select(partition_key(partition_spec(by)).alias("k")).collect()]
        assert got == want, (tz, by)
    # two UTC days: two keys in every zone (a date formatted in New York would join the first two)
    assert len({day(_micros(t)) for t in INSTANTS[:2]}) == 2


def test_segment_runs_join_consecutive_segments_of_a_partition_only() -> None:
    """The Spark engine reads each run with one scan: runs never span a gap or two partitions."""
    from rlm.tables.ledger import SegmentWork
    from rlm.tables.spark_engine import segment_runs

    g = [SegmentWork(1, "d", 0, 50), SegmentWork(0, "b", 100, 200), SegmentWork(0, "a", 0, 100),
         SegmentWork(0, "c", 250, 300), SegmentWork(1, "e", 50, 60)]
    assert [[w.segment_id for w in run] for run in segment_runs(g)] == [["a", "b"], ["c"], ["d", "e"]]
    assert segment_runs([]) == []


def test_by_offset_names_the_segment_holding_each_offset(spark: Any) -> None:
    """Each row gets the value of the segment whose [start, end) holds its offset; segments that
    share a value (a commit group) share a branch and still answer per offset."""
    from rlm.tables.ledger import SegmentWork
    from rlm.tables.spark_engine import by_offset

    run = [SegmentWork(0, "a", 0, 10), SegmentWork(0, "b", 10, 20), SegmentWork(0, "c", 20, 25),
           SegmentWork(0, "d", 25, 40)]
    group = {"a": 0, "b": 0, "c": 1, "d": 2}
    df = spark.createDataFrame([(o,) for o in (0, 9, 10, 19, 20, 24, 25, 39)], "offset long")
    got = df.select("offset", by_offset(run, lambda w: w.segment_id).alias("s"),
                    by_offset(run, lambda w: group[w.segment_id]).alias("g")).collect()
    assert [(r["s"], r["g"]) for r in got] == [("a", 0), ("a", 0), ("b", 0), ("b", 0), ("c", 1), ("c", 1),
                                              ("d", 2), ("d", 2)]
    assert [r["s"] for r in df.select(by_offset(run[:1], lambda w: w.segment_id).alias("s")).collect()] == \
        ["a"] * 8
