"""Spark read benchmark: ``kafka-tiered`` vs the Python Data Source ceiling (and Spark's Kafka source).

Builds a tiered topic of ``--records`` records (16-byte keys, 100-byte values) per codec (none and
zstd) with ``rlm.log`` and the daemon (``--once``, local plugin + file store), then runs on
``local[N]`` the same aggregation (``count(*), sum(length(value)), max(offset)``), best of
``--repeat``, over:

* ``kafka-tiered`` reading the tiered segments;
* the ceiling: a Python data source yielding Arrow batches of the same shape already in memory
  (same number of tasks), i.e. what Spark's Python-source transport alone allows;
* with ``--kafka-jars GLOB`` (``spark-sql-kafka-0-10_2.13`` for the installed pyspark and its
  deps) and ``--bootstrap``: Spark's built-in Kafka source reading topics of the same names from
  that broker.

    .venv/bin/python benchmarks/bench_spark.py --records 5000000
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

QUERY = "SELECT count(*) AS n, sum(length(value)) AS b, max(offset) AS m FROM t"


def write_topic(log_dir: Path, topic: str, records: int, codec: str) -> None:
    from rlm.log.checkpoints import MetaProperties
    from rlm.log.encode import encode_batch
    from rlm.log.model import Compression
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
    from rlm.types import KafkaUuid, TopicPartition

    now = int(time.time() * 1000)
    per = 1000
    comp = Compression.ZSTD if codec == "zstd" else Compression.NONE
    pool = []
    for j in range(16):
        recs = [(f"key-{j:04d}-{i:06d}".encode(), os.urandom(25).hex().encode() * 2, (), now + i)
                for i in range(per)]
        pool.append(encode_batch(recs, base_offset=0, compression=comp, producer_id=7, producer_epoch=0,
                                 base_sequence=0))
    w = PartitionWriter(log_dir / f"{topic}-0", topic_id=KafkaUuid.random(),
                        config=WriterConfig(segment_bytes=128 << 20))
    for b in range(records // per):
        w.append_encoded(pool[b % len(pool)], now=now)
    w.roll(now)
    w.append_encoded(pool[0], now=now)
    w.close()
    write_log_dir_files(log_dir, [(TopicPartition(topic, 0), w.log_end_offset)],
                        meta=MetaProperties(1, "bench-spark-cluster-0001", 1))


def tier(root: Path, records: int) -> Path:
    from rlm.daemon.logs import configure_logging

    from rlm.config import load_config
    from rlm.daemon.service import Daemon

    configure_logging("console", "warning")
    logs = root / "logs"
    for codec in ("none", "zstd"):
        write_topic(logs, f"bench-{codec}", records, codec)
    cfg = load_config(None, log_dirs=[str(logs)], work_dir=str(root / "work"), http={"enabled": False},
                      topic_defaults={"remote.storage.enable": True, "retention.ms": -1})
    d = Daemon(cfg, once=True).start()
    if d.run_once():
        raise SystemExit("tiering failed")
    d.stop()
    cf = root / "rlm.yaml"
    cf.write_text(yaml.safe_dump({"work_dir": str(root / "work")}))
    return cf


def ceiling_source(rows: int, tasks: int) -> type:
    """A Python data source yielding in-memory Arrow batches of Kafka-shaped rows."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from fetcher.spark.schema import arrow_schema, spark_schema

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceiling"

        def schema(self) -> Any:
            return spark_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return CeilingReader(schema)

    class CeilingReader(DataSourceReader):
        def __init__(self, schema: Any) -> None:
            self.target = arrow_schema(schema)

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(tasks)]

        def read(self, partition: InputPartition) -> Any:
            n = 65536
            base = pa.RecordBatch.from_arrays([
                pa.array([b"key-0000-000000"] * n, pa.binary()), pa.array([b"v" * 100] * n, pa.binary()),
                pa.array(["bench"] * n, pa.string()), pa.array([0] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32())], schema=self.target)
            left = rows // tasks
            while left > 0:
                yield base if left >= n else base.slice(0, left)
                left -= n

    return Ceiling


def best(spark: Any, df: Any, repeat: int) -> tuple[float, Any]:
    df.createOrReplaceTempView("t")
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = spark.sql(QUERY).collect()[0]
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--split-mb", type=int, default=128)
    ap.add_argument("--kafka-jars", help="glob of spark-sql-kafka and its dependency jars")
    ap.add_argument("--bootstrap", help="broker holding topics bench-none/bench-zstd (for --kafka-jars)")
    a = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import fetcher.spark

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        t0 = time.perf_counter()
        cf = tier(Path(tmp), a.records)
        print(f"tiered 2 x {a.records} records in {time.perf_counter() - t0:.1f}s", flush=True)
        b = (SparkSession.builder.master(f"local[{a.cores}]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.host", "127.0.0.1"))
        if a.kafka_jars:
            b = b.config("spark.jars", ",".join(sorted(glob.glob(a.kafka_jars))))
        spark = b.getOrCreate()
        try:
            fetcher.spark.register(spark)
            results = []
            for codec in ("none", "zstd"):
                df = (spark.read.format("kafka-tiered").option("rlm.config", str(cf))
                      .option("subscribe", f"bench-{codec}").option("rlm.splitBytes", str(a.split_mb << 20))
                      .load())
                tasks = df.rdd.getNumPartitions()
                secs, row = best(spark, df, a.repeat)
                results.append((f"kafka-tiered ({codec})", row.n, secs, tasks))
                if a.kafka_jars and a.bootstrap:
                    kdf = (spark.read.format("kafka").option("kafka.bootstrap.servers", a.bootstrap)
                           .option("subscribe", f"bench-{codec}").load())
                    ksecs, krow = best(spark, kdf, a.repeat)
                    ktasks = kdf.rdd.getNumPartitions()
                    results.append((f"spark kafka source ({codec})", krow.n, ksecs, ktasks))
            spark.dataSource.register(ceiling_source(a.records, tasks))
            secs, row = best(spark, spark.read.format("ceiling").load(), a.repeat)
            results.append(("ceiling (in-memory Arrow)", row.n, secs, tasks))
        finally:
            spark.stop()
    print(f"{'path':32} {'rows':>10} {'best s':>8} {'rows/s':>12} {'tasks':>6}")
    for name, n, secs, tasks in results:
        print(f"{name:32} {n:>10} {secs:>8.2f} {n / secs:>12,.0f} {tasks:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
