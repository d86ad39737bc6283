"""``rlm iceberg --engine spark``: the data files written by a Spark job, the commit unchanged.

For big backfills the rows should not pass through one Python process: here Spark reads each
group of segments through the ``kafka-tiered`` source (``startingOffsets``/``endingOffsets`` =
the segments' offsets, ``kafka.isolation.level`` as configured), shapes them to the table's
schema and writes Parquet under the table's ``data/`` directory, one directory per table
partition (so each file lies in one partition, as Iceberg requires). The driver then turns those
files into Iceberg data files (PyIceberg reads their footers: statistics, partition values) and
commits them exactly like the PyIceberg engine: the same fast append, the same ``rlm.segments``
ledger in the snapshot summary, the same conflict handling. So the two engines take turns on one
table and neither adds a segment the other added.

Why not ``iceberg-spark-runtime`` for the write: no runtime on Maven Central is built for Spark
4.3, the installed pyspark (docs/iceberg.md); the runtime would also commit on its own, without
the ledger check. Spark-written files carry no Iceberg field ids, so the table gets a name mapping
(``schema.name-mapping.default``, the standard way readers resolve such files). The warehouse
must be a filesystem Spark writes to (``file:``, or ``s3a:``/``hdfs:`` with their Hadoop jars).
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs
from pyiceberg.io.pyarrow import PyArrowFileIO, parquet_files_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table

from fetcher.iceberg.ledger import SegmentWork
from fetcher.iceberg.writer import IcebergSync, PassResult
from rlm.errors import ConfigError

NAME_MAPPING = "schema.name-mapping.default"
TS_CONF = "spark.sql.parquet.outputTimestampType"


def ensure_name_mapping(table: Table) -> Table:
    """Give the table the name mapping of its schema (readers resolve id-less files by name)."""
    if NAME_MAPPING in table.properties:
        return table
    mapping = table.schema().name_mapping.model_dump_json()
    return table.transaction().set_properties({NAME_MAPPING: mapping}).commit_transaction()


class SparkIcebergSync(IcebergSync):
    """:class:`IcebergSync` whose data files a Spark job writes (see the module docstring)."""

    def __init__(self, *args: Any, spark: Any, rlm_config: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.decoding is not None:
            raise ConfigError("iceberg.decode: value decoding runs in the pyiceberg engine only; "
                              "use --engine pyiceberg for a table with decoded columns")
        self.spark = spark
        self.rlm_config = rlm_config
        from fetcher.spark import register

        register(spark)
        check_writable(spark, self.table.location())
        self.table = ensure_name_mapping(self.table)

    def refresh(self) -> Any:
        ledger = super().refresh()
        self.table = ensure_name_mapping(self.table)
        return ledger

    def _frame(self, group: list[SegmentWork]) -> Any:
        """The group's rows: one ``kafka-tiered`` read per run of consecutive segments of a
        partition (not one per segment: each read is planned by its own Python data-source
        worker, which made a group of 51 segments ~4x slower than the backfill's single read),
        each row's ``segment_id`` from its offset."""
        from pyspark.sql import functions as F

        frames = []
        for run in segment_runs(group):
            offsets = {self.topic: {str(run[0].partition): run[0].start}}
            ending = {self.topic: {str(run[0].partition): run[-1].end}}
            df = (self.spark.read.format("kafka-tiered").option("rlm.config", self.rlm_config)
                  .option("subscribe", self.topic).option("includeHeaders", "true")
                  .option("startingOffsets", json.dumps(offsets)).option("endingOffsets", json.dumps(ending))
                  .option("kafka.isolation.level", self.isolation.name.lower()).load())
            segment = F.lit(run[-1].segment_id)
            if len(run) > 1:  # [start, end) of each segment: the first end above the offset names it
                chain = F.when(F.col("offset") < run[0].end, F.lit(run[0].segment_id))
                for w in run[1:-1]:
                    chain = chain.when(F.col("offset") < w.end, F.lit(w.segment_id))
                segment = chain.otherwise(F.lit(run[-1].segment_id))
            frames.append(df.withColumn("segment_id", segment))
        df = frames[0]
        for more in frames[1:]:
            df = df.unionByName(more)
        # coalesce() with a non-null literal makes a column non-nullable: the table's required fields
        cols = [
            F.col("key"), F.col("value"),
            F.coalesce(F.col("topic"), F.lit("")).alias("topic"),
            F.coalesce(F.col("partition"), F.lit(-1)).alias("partition"),
            F.coalesce(F.col("offset"), F.lit(-1).cast("long")).alias("offset"),
            F.coalesce(F.col("timestamp"), F.lit(0).cast("timestamp")).alias("timestamp"),
            F.coalesce(F.col("timestampType"), F.lit(0)).alias("timestampType"),
            F.transform("headers", lambda h: F.struct(F.coalesce(h["key"], F.lit("")).alias("key"),
                                                      h["value"].alias("value"))).alias("headers"),
            F.coalesce(F.col("segment_id"), F.lit("")).alias("segment_id"),
        ]
        return df.select(*cols, partition_key(self.table.spec()).alias("_rlm_part"))

    def write_files(self, group: list[SegmentWork], topic_id: str,
                    result: PassResult) -> tuple[list[DataFile], int]:
        out = f"{self.table.location().rstrip('/')}/data/spark-{uuid.uuid4().hex}"
        df = self._frame(group)
        old = self.spark.conf.get(TS_CONF, None)
        self.spark.conf.set(TS_CONF, "TIMESTAMP_MICROS")  # Iceberg's timestamptz (not INT96)
        try:
            (df.repartition("_rlm_part").sortWithinPartitions("partition", "offset")
             .write.partitionBy("_rlm_part").mode("errorifexists").parquet(out))
        finally:
            if old is None:
                self.spark.conf.unset(TS_CONF)
            else:
                self.spark.conf.set(TS_CONF, old)
        paths = _parquet_under(self.table, out)
        files = list(parquet_files_to_data_files(self.table.io, self.table.metadata, iter(paths)))
        return files, sum(int(f.record_count) for f in files)


def segment_runs(group: list[SegmentWork]) -> list[list[SegmentWork]]:
    """The group's segments as runs of one partition whose offsets follow on (``start`` of one
    = ``end`` of the one before), in offset order: each run is one contiguous offset range."""
    runs: list[list[SegmentWork]] = []
    for w in sorted(group, key=lambda w: (w.partition, w.start)):
        last = runs[-1][-1] if runs else None
        if last is not None and last.partition == w.partition and last.end == w.start:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs


def check_writable(spark: Any, location: str) -> None:
    """Refuse at start a table whose location Spark's Hadoop has no filesystem for (``s3://`` of
    a REST catalog's warehouse without ``hadoop-aws``, say), instead of failing in the first job
    after the plan. Under Spark Connect (no JVM in this process) the job's own error says it."""
    scheme = urlparse(location).scheme or "file"
    try:
        jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    except Exception:  # Spark Connect: no SparkContext here
        return
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Exception as e:  # py4j's Py4JJavaError of Hadoop's UnsupportedFileSystemException
        raise ConfigError(
            f"rlm iceberg --engine spark: the table's location {location} is not a filesystem this Spark "
            f"writes to (no Hadoop FileSystem for scheme {scheme!r}: add its jars and `spark.hadoop.fs."
            f"{scheme}.impl`, e.g. hadoop-aws' S3AFileSystem for s3), or use --engine pyiceberg "
            f"({str(e).splitlines()[0][:200]})") from None


def partition_key(spec: PartitionSpec) -> Any:
    """A Spark column naming the table partition of each row: what the job's files are split by
    (each file must lie in one partition). ``day``/``hour`` are Iceberg's transforms, i.e. whole
    days/hours since the epoch in UTC, computed from the instant: never from a formatted date,
    which Spark renders in the session's time zone (``spark.sql.session.timeZone``, the JVM's
    by default), so a session not on UTC would put two UTC days in one file, a file PyIceberg then
    refuses ("more than one partition values")."""
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col("timestamp"))
    keys = []
    for field in spec.fields:
        if field.name == "timestamp_day":
            keys.append(F.floor(micros / 86_400_000_000).cast("string"))
        elif field.name == "timestamp_hour":
            keys.append(F.floor(micros / 3_600_000_000).cast("string"))
        elif field.name == "topic":
            keys.append(F.col("topic"))
        else:
            keys.append(F.col("partition").cast("string"))
    return F.concat_ws("_", *keys) if keys else F.lit("all")


def _parquet_under(table: Table, location: str) -> list[str]:
    """The Parquet files Spark wrote under ``location``, as URIs of the table's FileIO."""
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    fs = (table.io.fs_by_scheme(scheme, netloc) if isinstance(table.io, PyArrowFileIO)
          else pafs.FileSystem.from_uri(location)[0])
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    prefix = location[: len(location) - len(path)] if location.endswith(path) else f"{scheme}://"
    return sorted(prefix + i.path for i in infos
                  if i.type == pafs.FileType.File and i.path.endswith(".parquet"))
