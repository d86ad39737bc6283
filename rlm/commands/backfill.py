"""``rlm backfill``: copy a time range of a topic from tiered storage to Parquet with Spark.

Reads ``[--from, --to)`` (record timestamps, KIP-33 offsets per partition) through the
``kafka-tiered`` data source — executors read segments straight from S3/HDFS/local storage, no
broker — and writes Parquet partitioned by ``date`` (and ``hour``) of the record timestamp, in UTC.
Re-running a range overwrites exactly the output partitions it writes (Spark's dynamic partition
overwrite), so a failed or repeated backfill is safe to run again; ranges should therefore start
and end on partition boundaries (a warning says when they do not: a partial day replaces the
whole day). While it runs, one progress line on stderr (rows and bytes written, stages, tasks,
ETA; Spark's own console bar is turned off). Exit status 0 with a one-line summary (rows,
bytes, time), 1 when Spark fails.

The same job under ``spark-submit``: ``examples/spark_backfill.py`` (see docs/spark.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlm.commands.backfill_progress import SPARK_CONF, progress_line
from rlm.errors import ConfigError

_UTC = dt.UTC


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("backfill", help="copy a time range of a topic from tiered storage to Parquet",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=backfill)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, required=True, help="the `rlm run` configuration file")
    p.add_argument("--topic", "-t", required=True, help="topic (or comma-separated topics)")
    p.add_argument("--from", dest="start", required=True,
                   help="start, inclusive: ISO-8601 (UTC if no zone) or ms")
    p.add_argument("--to", dest="end", required=True, help="end, exclusive: ISO-8601 (UTC if no zone) or ms")
    p.add_argument("--output", "-o", required=True, help="output URL: a path, hdfs://..., s3a://...")
    p.add_argument("--format", default="parquet", choices=["parquet"], help="output format")
    p.add_argument("--partition-by", default="date", choices=["date", "hour"],
                   help="output partitioning by record timestamp (UTC)")
    p.add_argument("--master", help="Spark master URL (default: the spark-submit one, else local[*])")
    p.add_argument("--isolation", default="read_committed", choices=["read_committed", "read_uncommitted"],
                   help="skip records of aborted transactions (default) or keep them")
    p.add_argument("--include-headers", action="store_true", help="write the headers column")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")


def parse_time(text: str, what: str) -> int:
    """Milliseconds since the epoch from ms digits or ISO-8601 (a date alone is midnight UTC)."""
    s = text.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--{what}: {text!r} is neither ISO-8601 nor milliseconds since the epoch") \
            from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_UTC)
    return int(t.timestamp() * 1000)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, _UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _aligned(ms: int, partition_by: str) -> bool:
    return ms % (3_600_000 if partition_by == "hour" else 86_400_000) == 0


def session(master: str | None, confs: Sequence[str]) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.appName("rlm-backfill")
    if master:
        b = b.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit (which sets the master)
        b = b.master(os.environ.get("MASTER", "local[*]"))
    b = b.config("spark.sql.session.timeZone", "UTC")
    for k, v in SPARK_CONF.items():  # Spark's console bar would fight the backfill's progress line
        b = b.config(k, v)
    b = b.config("spark.sql.sources.partitionOverwriteMode", "dynamic")
    for kv in confs:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ConfigError(f"--conf {kv!r}: expected KEY=VALUE")
        b = b.config(k.strip(), v)
    return b.getOrCreate()


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The backfill on ``spark``; returns the summary (rows, bytes, partitions, seconds)."""
    from pyspark.sql import functions as F

    import fetcher.spark

    start, end = parse_time(args.start, "from"), parse_time(args.end, "to")
    if end <= start:
        raise ConfigError(f"--to {args.end!r} must be after --from {args.start!r}")
    for ms, what in ((start, "from"), (end, "to")):
        if not _aligned(ms, args.partition_by):
            print(f"rlm backfill: warning: --{what} {_iso(ms)} is not on a {args.partition_by} boundary; "
                  f"the partition it falls in is replaced by this range's records only", file=sys.stderr)
    t0 = time.monotonic()
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    fetcher.spark.register(spark)
    df = (spark.read.format("kafka-tiered").option("rlm.config", str(args.config))
          .option("subscribe", args.topic).option("startingTimestamp", str(start))
          .option("endingTimestamp", str(end)).option("startingOffsetsByTimestampStrategy", "latest")
          .option("includeHeaders", "true" if args.include_headers else "false")
          .option("kafka.isolation.level", args.isolation).load())
    cols = ["date"] if args.partition_by == "date" else ["date", "hour"]
    df = df.withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))
    if args.partition_by == "hour":
        df = df.withColumn("hour", F.date_format("timestamp", "HH"))
    with progress_line(spark):
        df.write.mode("overwrite").partitionBy(*cols).format(args.format).save(args.output)
    out = spark.read.format(args.format).load(args.output)
    written = out.where((F.col("timestamp") >= F.lit(start / 1000).cast("timestamp"))
                        & (F.col("timestamp") < F.lit(end / 1000).cast("timestamp")))
    files = [r[0] for r in written.select(F.input_file_name()).distinct().collect()]
    rows = written.count()
    dirs = {f.rsplit("/", 1)[0] for f in files}
    return {"rows": rows, "bytes": _bytes(spark, files), "partitions": len(dirs),
            "seconds": time.monotonic() - t0, "from": _iso(start), "to": _iso(end)}


def _bytes(spark: Any, files: list[str]) -> int:
    """Bytes of the written files (Hadoop FileSystem, any scheme Spark can write)."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    total = 0
    for f in files:
        path = jvm.org.apache.hadoop.fs.Path(f)
        total += int(path.getFileSystem(conf).getFileStatus(path).getLen())
    return total


def _cause(e: BaseException) -> str:
    """The line that says what went wrong: the innermost Python error Spark relayed, if any."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception): ", ln) and not ln.startswith("at ")]
    return errors[-1] if errors else (lines[0] if lines else type(e).__name__)


def backfill(args: argparse.Namespace, spark: Any = None) -> int:
    own = spark is None
    if own:
        spark = session(args.master, args.conf)
    try:
        try:
            s = run(spark, args)
        except ConfigError:
            raise
        except Exception as e:  # Spark/py4j errors: one line, exit 1
            print(f"rlm backfill: failed: {_cause(e)}", file=sys.stderr)
            return 1
        print(f"rlm backfill: {args.topic} {s['from']}..{s['to']}: {s['rows']} rows, {s['bytes']} bytes "
              f"in {s['partitions']} partitions to {args.output} in {s['seconds']:.1f}s")
        return 0
    finally:
        if own:
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit examples/spark_backfill.py ...`` (same arguments)."""
    p = argparse.ArgumentParser(prog="spark_backfill", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return backfill(args)
    except ConfigError as e:
        print(f"rlm backfill: error: {e}", file=sys.stderr)
        return 2
