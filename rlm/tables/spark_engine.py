"""``rlm iceberg --engine spark``: the data files written by a Spark job, the commit unchanged.

For big backfills the rows should not pass through one Python process: here ONE Spark job per
pass reads the segments of all its commit groups through the ``kafka-tiered`` source
(``startingOffsets``/``endingOffsets`` = each run of consecutive segments' offsets,
``kafka.isolation.level`` as configured), shapes them to the table's schema and writes Parquet
under the table's ``data/`` directory, without a shuffle: each task sorts its rows and writes
one directory per commit group and, in it, per table partition (so each file lies in one
partition, as Iceberg requires, and holds one group's rows). The driver then turns those files
into Iceberg data files (PyIceberg reads their footers: statistics, partition values) and
commits them group by group exactly like the PyIceberg engine: one fast append per group, in
the same order, the same ``rlm.segments`` ledger in the snapshot summary, the same conflict
handling. So the two engines take turns on one table and neither adds a segment the other
added. A crash after the job leaves the files of the groups not committed yet as orphans (as a
crash between one group's files and its commit always did); the next pass writes those
segments again, in a directory of its own.

Why not ``iceberg-spark-runtime`` for the write: no runtime on Maven Central is built for Spark
4.3, the installed pyspark (docs/iceberg.md); the runtime would also commit on its own, without
the ledger check. Spark-written files carry no Iceberg field ids, so the table gets a name mapping
(``schema.name-mapping.default``, the standard way readers resolve such files). The warehouse
must be a filesystem Spark writes to (``file:``, or ``s3a:``/``hdfs:`` with their Hadoop jars).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import structlog
from pyiceberg.io.pyarrow import parquet_files_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table

from rlm.errors import ConfigError, IcebergTableError
from rlm.tables.ledger import SegmentWork
from rlm.tables.table import parquet_files
from rlm.tables.writer import IcebergSync, PassResult

log = structlog.get_logger(__name__)

NAME_MAPPING = "schema.name-mapping.default"
TS_CONF = "spark.sql.parquet.outputTimestampType"
TARGET_SIZE = "write.target-file-size-bytes"
GROUP = "_rlm_group"  # the pass's write: a directory per commit group ...
PART = "_rlm_part"  # ... and in it one per table partition


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
        self._prepared: dict[tuple[SegmentWork, ...], list[DataFile]] = {}  # this pass's, per group
        self._pass_groups: list[list[SegmentWork]] = []  # the pass's groups, in commit order
        from fetcher.spark import register

        register(spark)
        check_writable(spark, self.table.location())
        self.table = ensure_name_mapping(self.table)

    def refresh(self) -> Any:
        ledger = super().refresh()
        self.table = ensure_name_mapping(self.table)
        return ledger

    def _frame(self, groups: list[list[SegmentWork]]) -> Any:
        """The rows of every group of the pass: one ``kafka-tiered`` read per run of consecutive
        segments of a partition (not one per segment: each read is planned by its own Python
        data-source worker, which made a group of 51 segments ~4x slower than the backfill's
        single read; a run may span several commit groups), each row's ``segment_id`` and
        ``_rlm_group`` (its commit group's index) from its offset, and ``_rlm_part`` (its table
        partition). Each read's tasks are about the table's target file size of segment bytes
        (``rlm.splitBytes``): a task's rows of one group and table partition make one file."""
        from pyspark.sql import functions as F

        group_of = {w: k for k, group in enumerate(groups) for w in group}
        split = str(self.table.properties.get(TARGET_SIZE, self.config.target_file_size_bytes))
        frames = []
        for run in segment_runs([w for group in groups for w in group]):
            offsets = {self.topic: {str(run[0].partition): run[0].start}}
            ending = {self.topic: {str(run[0].partition): run[-1].end}}
            df = (self.spark.read.format("kafka-tiered").option("rlm.config", self.rlm_config)
                  .option("subscribe", self.topic).option("includeHeaders", "true")
                  .option("startingOffsets", json.dumps(offsets)).option("endingOffsets", json.dumps(ending))
                  .option("kafka.isolation.level", self.isolation.name.lower())
                  .option("rlm.splitBytes", split).load())
            frames.append(df.withColumn("segment_id", by_offset(run, lambda w: w.segment_id))
                          .withColumn(GROUP, by_offset(run, group_of.__getitem__)))
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
        return df.select(*cols, partition_key(self.table.spec()).alias(PART), F.col(GROUP))

    def pass_frame(self, groups: list[list[SegmentWork]]) -> Any:
        """The pass's rows as written: no shuffle (each task sorts its own rows by commit group,
        table partition, then (partition, offset), and writes one file per group and table
        partition it holds, under ``_rlm_group=<k>/_rlm_part=<key>/``), so the pass is one Spark
        job of a single stage. The sort's first two keys are the write's partition columns, so
        Spark's file writer adds no sort of its own."""
        return self._frame(groups).sortWithinPartitions(GROUP, PART, "partition", "offset")

    def prepare_pass(self, groups: list[list[SegmentWork]], topic_id: str, result: PassResult) -> None:
        """Remember the pass's groups and write the first job's worth of them (at most
        ``spark_segments_per_job`` segments, whole groups): the commit loop's :meth:`write_files`
        starts the next job when it reaches a group not written yet. So a pass's files never wait
        longer than one job for their commits (``rlm iceberg compact`` deletes unreferenced files
        older than ``orphan_min_age_ms``)."""
        self._pass_groups = list(groups)
        if groups:
            self._write_job(self._next_job(0))

    def _next_job(self, first: int) -> list[list[SegmentWork]]:
        """The groups from index ``first`` on that one job writes (at least one)."""
        job: list[list[SegmentWork]] = []
        segments = 0
        for group in self._pass_groups[first:]:
            if job and segments + len(group) > self.config.spark_segments_per_job:
                break
            job.append(group)
            segments += len(group)
        return job

    def _write_job(self, groups: list[list[SegmentWork]]) -> None:
        """The data files of ``groups`` in one Spark job (see :meth:`pass_frame`), under a
        directory of this job's own: a later pass never takes them (it writes again what the
        ledger lacks). Group ``k``'s files are those under ``_rlm_group=<k>/``."""
        out = f"{self.table.location().rstrip('/')}/data/spark-{uuid.uuid4().hex}"
        t0 = time.monotonic()
        old = self.spark.conf.get(TS_CONF, None)
        self.spark.conf.set(TS_CONF, "TIMESTAMP_MICROS")  # Iceberg's timestamptz (not INT96)
        try:
            self.pass_frame(groups).write.partitionBy(GROUP, PART).mode("errorifexists").parquet(out)
        finally:
            if old is None:
                self.spark.conf.unset(TS_CONF)
            else:
                self.spark.conf.set(TS_CONF, old)
        t1 = time.monotonic()
        paths = parquet_files(self.table, out)
        files = list(parquet_files_to_data_files(self.table.io, self.table.metadata, iter(paths)))
        by_group: dict[int, list[DataFile]] = {k: [] for k in range(len(groups))}
        for f in files:
            by_group[group_in_path(f.file_path)].append(f)
        self._prepared.update({tuple(group): by_group[k] for k, group in enumerate(groups)})
        log.info("iceberg_spark_job_written", table=self.identifier, location=out, groups=len(groups),
                 segments=sum(len(g) for g in groups), files=len(files), job_s=round(t1 - t0, 3),
                 footers_s=round(time.monotonic() - t1, 3))

    def write_files(self, group: list[SegmentWork], topic_id: str,
                    result: PassResult) -> tuple[list[DataFile], int]:
        """The group's files, written by an earlier job of the pass or by the next one, started
        here (from this group on, :meth:`_next_job`). Handed out once: from here on, the commit
        (or its clean-up) owns them."""
        if tuple(group) not in self._prepared:
            at = next((i for i, g in enumerate(self._pass_groups) if g == group), None)
            self._write_job([group] if at is None else self._next_job(at))
        files = self._prepared.pop(tuple(group))
        return files, sum(int(f.record_count) for f in files)

    def end_pass(self) -> None:
        """Delete the files of groups prepared but never handed to a commit (the pass stopped on a
        conflict, which replans, or an error): they would be orphans otherwise."""
        left = [f for files in self._prepared.values() for f in files]
        self._prepared, self._pass_groups = {}, []
        self._delete(left)


def by_offset(run: list[SegmentWork], value: Callable[[SegmentWork], Any]) -> Any:
    """A Spark column: ``value`` of the segment of ``run`` (consecutive segments of one partition)
    holding each row's offset, i.e. of the first segment whose ``end`` is above it; consecutive
    segments with one value make one branch."""
    from pyspark.sql import functions as F

    spans: list[tuple[int, Any]] = []  # (end, value)
    for w in run:
        v = value(w)
        if spans and spans[-1][1] == v:
            spans[-1] = (w.end, v)
        else:
            spans.append((w.end, v))
    if len(spans) == 1:
        return F.lit(spans[0][1])
    chain = F.when(F.col("offset") < spans[0][0], F.lit(spans[0][1]))
    for end, v in spans[1:-1]:
        chain = chain.when(F.col("offset") < end, F.lit(v))
    return chain.otherwise(F.lit(spans[-1][1]))


def group_in_path(path: str) -> int:
    """The commit group index of a file the pass's job wrote (its ``_rlm_group=<k>`` directory)."""
    m = re.search(rf"/{GROUP}=(\d+)/", path)
    if m is None:
        raise IcebergTableError(f"Spark engine: {path} lies in no {GROUP}= directory of its pass")
    return int(m.group(1))


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
