"""Spark read benchmark: ``kafka-tiered`` vs Spark's built-in Kafka source vs the Python-source ceiling.

One self-contained run:

1. starts a real Kafka broker (KRaft, 127.0.0.1, ``tests/services/kafka.py``) with 128 MiB
   segments and produces ``--records`` records per codec (16-byte keys, 100-byte values, zstd and
   none) into topics ``bench-<codec>`` with a fast producer (confluent-kafka, ~1 MB batches);
   then rolls the active segment (``segment.ms`` lowered, one marker record) so every produced
   record is in a rolled segment;
2. tiers those segments with the daemon (``rlm run --once``, file metadata store, reading the
   broker's log dir read-only) to ``--storage``: ``s3`` (the default: the ``s3`` plugin on
   SeaweedFS ``weed mini``, started as the tests do — the backfill case, history in S3) or
   ``local`` (the ``local`` plugin; files in the page cache);
3. on one ``local[N]`` SparkSession (same configuration for every path, connector jars on its
   classpath) runs ``count(*), sum(length(value)), max(offset)`` and a content digest
   ``bit_xor(xxhash64(partition, offset, key, value))`` (order-free; every record distinct by its
   offset) over offsets ``[0, records)``, in interleaved rounds (every path once per round) after a
   warm-up round, with:

   * ``builtin``: ``spark.read.format("kafka")`` reading the broker
     (``spark-sql-kafka-0-10``, ``minPartitions`` = the task count of ``kafka-tiered``);
   * ``kafka-tiered``: the tiered segments;
   * ``ceiling``: a Python data source yielding in-memory Arrow batches of the same shape with the
     same number of tasks — what Spark's Python-source transport alone allows.

Fairness: both real sources read the same offsets of the same partitions with the same number of
tasks, each task a contiguous offset range; the built-in source gets its consumer defaults. The
broker runs on the same cores (it serves the built-in source's fetches; it is idle otherwise).
In every round the answers (count, bytes, max offset, digest) of ``builtin`` and ``kafka-tiered``
over both codecs must all be equal (both topics hold the same records), and each ``ceiling`` (other,
synthetic rows) must give the same answer in every round; else the benchmark fails (exit 2).
Printed: the median of the per-round ratios (on a shared machine the load moves whole rounds;
same-round ratios are steadier). Raw results: ``docs/data/bench-spark-<storage>.json``
(``bench-spark-<storage>-<n>rec.json`` at another size than the default).

    .venv/bin/python benchmarks/bench_spark.py --records 5000000
    .venv/bin/python benchmarks/bench_spark.py --records 5000000 --storage local
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Recorder, Result, headline, run_rounds, sized_name  # noqa: E402

QUERY = ("SELECT count(*) AS n, sum(length(value)) AS b, max(offset) AS m, "
         "bit_xor(xxhash64(partition, offset, key, value)) AS h FROM t")
CODECS = ("none", "zstd")
VALUE_BYTES = 100
DEFAULT_RECORDS = 5_000_000  # per codec, the documented default (make bench runs 500000: recorded apart)


def connector_jars() -> list[str]:
    """spark-sql-kafka-0-10 + its deps (``make jars``) and the broker's kafka-clients."""
    cache = REPO / ".cache"
    jars = sorted((cache / "spark-kafka" / "lib").glob("*.jar"))
    clients = sorted((cache / "kafka" / "lib").glob("kafka-clients-*[0-9].jar"))
    if not jars or not clients:
        raise SystemExit("connector jars missing: run `make jars`")
    return [str(p) for p in [*jars, *clients]]


# ---- data: a real broker writes it -------------------------------------------------------------
def produce(bootstrap: str, topic: str, partitions: int, records: int, codec: str) -> list[int]:
    """``records`` records spread evenly over the partitions; returns the count per partition."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
                  "batch.size": 1_000_000, "batch.num.messages": 100_000, "acks": "1",
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    rnd = random.Random(7)  # the same records in every topic: one digest for both codecs
    values = [rnd.randbytes(VALUE_BYTES // 4).hex().encode() * 2 for _ in range(4096)]
    counts = [records // partitions + (1 if i < records % partitions else 0) for i in range(partitions)]
    for part, n in enumerate(counts):
        for i in range(n):
            while True:
                try:
                    p.produce(topic, values[i & 4095], f"key-{i:012d}".encode(), partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
            if i & 0xFFFF == 0:
                p.poll(0)
    if p.flush(300):
        raise SystemExit(f"{topic}: records left unsent")
    return counts


def roll(bootstrap: str, topic: str, partitions: int) -> None:
    """Close the active segments: with ``segment.ms`` tiny, the next append opens a new segment."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("segment.ms", "100", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource("topic", topic,
                                                             incremental_configs=[entry])]).values():
        f.result(60)
    time.sleep(1.0)  # the marker's timestamp must be segment.ms past the active segment's first batch
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        p.produce(topic, b"roll-marker", b"m", partition=part)
    if p.flush(60):
        raise SystemExit(f"{topic}: marker unsent")


def broker_data(cluster: Any, records: int, partitions: int) -> dict[str, list[int]]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    counts = {}
    for codec in CODECS:
        topic = f"bench-{codec}"
        admin.create_topics([NewTopic(topic, partitions, 1, config={"segment.bytes": str(128 << 20)})]
                            )[topic].result(60)
        t0 = time.perf_counter()
        counts[codec] = produce(cluster.bootstrap, topic, partitions, records, codec)
        roll(cluster.bootstrap, topic, partitions)
        print(f"produced {records} records ({codec}) in {time.perf_counter() - t0:.1f}s", flush=True)
    return counts


def tier(root: Path, cluster: Any, counts: dict[str, list[int]], storage: dict[str, Any]) -> Path:
    """``rlm run --once`` over the broker's log dir until every produced record is tiered."""
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from rlm.logging_setup import configure_logging
    from rlm.plugin_setup import load_rlmm

    configure_logging("console", "warning")
    shared = {"work_dir": str(root / "work"), "storage": storage,
              "metadata": {"manager": "file", "config": {"dir": str(root / "metadata")}}}
    cfg = load_config(None, log_dirs=[str(cluster.log_dir)], **shared,
                      bootstrap_servers=cluster.bootstrap, http={"enabled": False},
                      topics=[{"pattern": "bench-*", "remote.storage.enable": True, "retention.ms": -1}])
    deadline = time.monotonic() + 600
    while True:
        d = Daemon(cfg, once=True).start()
        failed = d.run_once()
        d.stop()
        missing = _untiered(cfg, load_rlmm, counts)
        if not failed and not missing:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"tiering incomplete: {missing}")
        time.sleep(0.5)
    cf = root / "rlm.yaml"
    cf.write_text(yaml.safe_dump(shared))
    return cf


def _untiered(cfg: Any, build: Callable[..., Any], counts: dict[str, list[int]]) -> list[str]:
    """Partitions whose remote end offset is below the produced count."""
    rlmm = build(cfg, 1, read_only=True)
    try:
        rlmm.follow_all()
        known = {(tp.topic, tp.partition): tp for tp in rlmm.known_partitions()}
        out = []
        for codec, per in counts.items():
            topic = f"bench-{codec}"
            for part, n in enumerate(per):
                tp = known.get((topic, part))
                ends = [md.end_offset for md in rlmm.list_remote_log_segments(tp)] if tp else []
                if max(ends, default=-1) < n - 1:
                    out.append(f"{topic}-{part}")
        return out
    finally:
        rlmm.close()


# ---- the ceiling -------------------------------------------------------------------------------
def ceiling_source(rows: int, tasks: int, name: str) -> type:
    """A Python data source yielding in-memory Arrow batches of Kafka-shaped rows."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from fetcher.spark.schema import arrow_schema, spark_schema

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

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
            first = partition.value * (rows // tasks)
            count = rows // tasks if partition.value < tasks - 1 else rows - first
            base = pa.RecordBatch.from_arrays([
                pa.array([b"key-000000000000"] * n, pa.binary()),
                pa.array([b"v" * VALUE_BYTES] * n, pa.binary()),
                pa.array(["bench"] * n, pa.string()), pa.array([0] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32())], schema=self.target)
            done = 0
            while done < count:
                k = min(n, count - done)
                yield base if k == n else base.slice(0, k)
                done += k

    return Ceiling


# ---- measuring ---------------------------------------------------------------------------------
def run_query(spark: Any, df: Any) -> Result:
    df.createOrReplaceTempView("t")
    t0 = time.perf_counter()
    row = spark.sql(QUERY).collect()[0]
    secs = time.perf_counter() - t0
    return Result(secs, f"{row.n}:{row.b}:{row.m}:{row.h}", int(row.b or 0), int(row.n))


def offsets_json(topic: str, counts: list[int], end: bool) -> str:
    return json.dumps({topic: {str(p): (n if end else -2) for p, n in enumerate(counts)}})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=DEFAULT_RECORDS, help="records per codec")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    ap.add_argument("--storage", choices=("s3", "local"), default="s3")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (JIT, Python workers)")
    ap.add_argument("--split-mb", type=int, default=128, help="rlm.splitBytes, MiB")
    ap.add_argument("--max-batch-rows", type=int, default=65536, help="kafka-tiered rlm.maxBatchRows")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--broker-heap", default="1g")
    ap.add_argument("--keep", action="store_true", help="keep the broker's and the daemon's files")
    ap.add_argument("--no-save", action="store_true",
                    help="write no docs/data/bench-spark-<storage>[-<n>rec].json")
    a = ap.parse_args()
    rec = Recorder(sized_name(f"spark-{a.storage}", a.records, DEFAULT_RECORDS, "rec"), a)

    from fetcher.spark import register
    from tests.daemon.helpers import s3_storage
    from tests.fixtures.spark import start_local_spark, stop_local_spark
    from tests.services.kafka import KafkaCluster
    from tests.services.proc import RUN_DIR
    from tests.services.s3 import SeaweedFS

    root = RUN_DIR / f"bench-spark-{time.time_ns()}"
    root.mkdir(parents=True)
    cluster = KafkaCluster(nodes=1, name="bench-spark", heap=a.broker_heap,
                           extra={"log.segment.bytes": str(128 << 20), "message.max.bytes": str(2 << 20)})
    weed = None
    spark = None
    tasks: dict[str, int] = {}
    try:
        cluster.start()
        if a.storage == "s3":
            weed = SeaweedFS(name="bench-spark").start()
            storage = s3_storage(weed, weed.create_bucket("bench-spark"))
            storage["config"].update(read_timeout=60.0, max_attempts=5)
        else:
            storage = {"plugin": "local", "config": {"root": str(root / "remote"), "fsync": False}}
        counts = broker_data(cluster, a.records, a.partitions)
        t0 = time.perf_counter()
        cf = tier(root, cluster, counts, storage)
        print(f"tiered 2 x {a.records} records to {a.storage} in {time.perf_counter() - t0:.1f}s", flush=True)
        for codec in CODECS:
            logs = [p.stat().st_size for p in cluster.log_dir.glob(f"bench-{codec}-*/*.log")]
            rec.facts[f"log_bytes_{codec}"] = sum(logs)
            print(f"  {codec}: {len(logs)} .log files, {sum(logs) / 2**20:.0f} MiB", flush=True)
        spark = start_local_spark(root / "spark", app_name="bench-spark", master=f"local[{a.cores}]",
                                  extra_conf={"spark.driver.memory": a.driver_memory,
                                              "spark.jars": ",".join(connector_jars())})
        register(spark)
        cases: dict[str, Callable[[], Result]] = {}
        registered: set[str] = set()
        for codec in CODECS:
            topic = f"bench-{codec}"
            rng = {"startingOffsets": offsets_json(topic, counts[codec], False),
                   "endingOffsets": offsets_json(topic, counts[codec], True)}
            tiered = (spark.read.format("kafka-tiered").option("rlm.config", str(cf))
                      .option("subscribe", topic).option("rlm.splitBytes", str(a.split_mb << 20))
                      .option("rlm.maxBatchRows", str(a.max_batch_rows)).options(**rng).load())
            n = tiered.rdd.getNumPartitions()
            builtin = (spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
                       .option("subscribe", topic).option("minPartitions", str(n)).options(**rng).load())
            name = f"ceiling{n}"
            if name not in registered:
                spark.dataSource.register(ceiling_source(a.records, n, name))
                registered.add(name)
            ceiling = spark.read.format(name).load()
            for path, df in (("builtin", builtin), ("kafka-tiered", tiered), ("ceiling", ceiling)):
                cases[f"{path} {codec}"] = (lambda df=df: run_query(spark, df))  # type: ignore[misc]
            tasks.update({f"kafka-tiered {codec}": n, f"ceiling {codec}": n,
                          f"builtin {codec}": builtin.rdd.getNumPartitions()})
        rec.facts["tasks"] = tasks
        rows = run_rounds(cases, a.rounds, warmup=a.warmup, label="spark", reference="builtin none",
                          own=[f"ceiling {c}" for c in CODECS])
        rec.section("query", rows)
        want_n = a.records
        got_n = rows[-1]["cases"]["builtin none"]["records"]
        if got_n != want_n:
            from benchlib import BenchFailure

            raise BenchFailure(f"builtin read {got_n} records, {want_n} produced")
        print(f"\n{a.records} records/codec, {a.partitions} partition(s), local[{a.cores}], storage "
              f"{a.storage}; median of per-round ratios:")
        for codec in CODECS:
            rec.add(headline(rows, f"Spark scan, {codec} ({a.storage})", f"kafka-tiered {codec}",
                             f"builtin {codec}", 2.0))
            rec.add(headline(rows, f"Spark scan vs Python-source ceiling, {codec} ({a.storage})",
                             f"kafka-tiered {codec}", f"ceiling {codec}", 0.8))
        rec.save(not a.no_save)
    finally:
        if spark is not None:
            stop_local_spark(spark)
        cluster.stop(keep_data=a.keep)
        if weed is not None:
            weed.stop()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
