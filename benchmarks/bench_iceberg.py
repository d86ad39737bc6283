"""Iceberg benchmark: ``rlm iceberg`` (PyIceberg) vs ``rlm backfill`` (Spark) to plain Parquet (not a test).

One self-contained run:

1. a real Kafka broker (one KRaft node, ``--segment-mb`` segments); ``--size-mb`` of 1 KiB
   records (distinct keys) whose CreateTime stamps spread evenly over ``--days`` past days; a
   confluent-kafka consumer reads them back: the reference (a digest of every record);
2. ``rlm run --once`` tiers them (``local`` storage plugin, file metadata store);
3. interleaved rounds (one warm-up, then ``--rounds``) of the whole history written:
   * ``iceberg (PyIceberg)``: ``IcebergSync.run_once`` into a new table (SQL catalog on SQLite,
     local warehouse, ``day(timestamp)`` partitions, 128 MiB target files): rows through the read
     core, sorted, Parquet data files, one snapshot per 4 segments;
   * ``iceberg (Spark engine)``: ``SparkIcebergSync.run_once`` (``rlm iceberg --engine spark``) into
     a new table on the same SparkSession: the data files written by a Spark job over the
     ``kafka-tiered`` source, committed through PyIceberg with the same ledger;
   * ``rlm backfill (Spark)``: ``rlm.commands.backfill.run`` of the same range (the ``kafka-tiered``
     source, plain Parquet by date, on one ``local[2]`` SparkSession created before the rounds;
     its time includes the backfill's own read-back count, as the command does);
   after each case (untimed) its output is read back (PyIceberg scan / the Parquet directory with
   PyArrow) and its digest must equal the broker's, else the benchmark fails;
4. interleaved rounds of one day's records (the middle day): the table scanned with that day's
   filter (PyIceberg, partition pruning) vs the read core scanning the whole remote range and
   filtering by timestamp (``RemoteFetcher.scan``; the same answer a Spark query through
   ``kafka-tiered`` gets without an Iceberg table). Spark with ``iceberg-spark-runtime`` is not
   used here (not in this project's jar cache): PyArrow on both sides. Digests must equal the
   broker's records of that day.

Printed: every round and the median of the per-round ratios. Raw: ``docs/data/bench-iceberg.json``.

    .venv/bin/python benchmarks/bench_iceberg.py --size-mb 384 --days 14   # the recorded run
"""

from __future__ import annotations

import argparse
import argparse as _ap
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import BenchFailure, Recorder, Result, headline, quiet_logs, run_rounds, table_digest

MB = 1 << 20
DAY_MS = 86_400_000
TOPIC = "bench-iceberg"


def produce(bs: str, n: int, record: int, day0: int, days: int) -> None:
    import random

    from confluent_kafka import Producer

    pool = [random.randbytes(record) for _ in range(256)]
    p = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "acks": "1",
            "queue.buffering.max.kbytes": 1 << 20,
            "compression.type": "none",
        }
    )
    step = days * DAY_MS // n
    for i in range(n):
        while True:
            try:
                p.produce(
                    TOPIC,
                    key=f"k{i}".encode(),
                    value=pool[i % len(pool)],
                    partition=0,
                    timestamp=day0 + i * step,
                )
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def broker_records(bs: str, end: int) -> Any:
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "bench-iceberg",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MB,
            "max.partition.fetch.bytes": 16 * MB,
        }
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    cols: dict[str, list[Any]] = {"offset": [], "key": [], "value": [], "ts": []}
    deadline = time.monotonic() + 600
    while (not cols["offset"] or cols["offset"][-1] < end - 1) and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is None and m.offset() < end:
                cols["offset"].append(m.offset())
                cols["key"].append(m.key())
                cols["value"].append(m.value())
                cols["ts"].append(m.timestamp()[1])
    c.close()
    if cols["offset"] != list(range(end)):
        raise BenchFailure(f"the broker's records are not offsets [0, {end})")
    return pa.table(
        {
            "offset": pa.array(cols["offset"], pa.int64()),
            "key": pa.array(cols["key"], pa.binary()),
            "value": pa.array(cols["value"], pa.binary()),
            "ts": pa.array(cols["ts"], pa.int64()),
        }
    )


def digest(t: Any) -> str:
    """The records' digest, whatever the readers' Arrow types (PyIceberg reads large_binary)."""
    import pyarrow as pa

    t = t.select(["offset", "key", "value"]).sort_by([("offset", "ascending")])
    t = t.cast(pa.schema([("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]))
    return table_digest({0: t})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--segment-mb", type=int, default=8)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-iceberg.json")
    ap.add_argument("--spark-segments-per-commit", type=int, default=None,
                    help="iceberg.segments_per_commit for the Spark engine case (default: the config's, 4): "
                    "one Spark job per commit")
    args = ap.parse_args()
    rec = Recorder("iceberg", args)
    quiet_logs()

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    from fetcher import RemoteFetcher
    from rlm.commands import backfill
    from rlm.config import IcebergConfig, load_config
    from rlm.daemon.service import Daemon
    from rlm.tables import IcebergSync
    from tests.daemon.helpers import create_topic
    from tests.services.kafka import KafkaCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    kafka = KafkaCluster(nodes=1, name="bench-iceberg", heap="1g").start()
    spark = None
    try:
        bs = kafka.bootstrap
        create_topic(bs, TOPIC, **{"segment.bytes": str(args.segment_mb * MB),
                                   "retention.ms": "-1"})  # CreateTime stamps reach --days back
        n = args.size_mb * MB // args.record_bytes
        day0 = (int(time.time() * 1000) // DAY_MS - args.days - 1) * DAY_MS
        produce(bs, n, args.record_bytes, day0, args.days)
        base: dict[str, Any] = {
            "bootstrap_servers": bs,
            "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
            "metadata": {"manager": "file", "config": {"dir": str(tmp / "metadata")}},
            "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "retention.ms": -1}],
            "http": {"enabled": False},
            "log_level": "warning",
        }
        d = Daemon(
            load_config(None, log_dirs=[str(kafka.log_dir)], work_dir=str(tmp / "work"), **base), once=True
        ).start()
        assert d.run_once() == 0
        d.stop()
        reader = load_config(None, work_dir=str(tmp / "reader"), **base)
        cfg_path = tmp / "reader.yaml"
        import yaml

        cfg_path.write_text(yaml.safe_dump({**base, "work_dir": str(tmp / "reader")}))
        f = RemoteFetcher.from_config(reader)
        plan = f.plan(TOPIC, 0)
        end = plan.log_end
        seg_bytes = sum(s.metadata.segment_size_in_bytes for s in plan.segments)
        ref = broker_records(bs, end)
        want = digest(ref)
        rec.facts.update(
            records=end,
            segments=len(plan.segments),
            segment_bytes=seg_bytes,
            reference_digest=want,
            days=args.days,
        )
        print(f"remote: {len(plan.segments)} segments, {end} records, {seg_bytes / MB:.0f} MB", flush=True)

        def fresh_catalog(name: str) -> tuple[Any, dict[str, str]]:
            shutil.rmtree(tmp / name, ignore_errors=True)
            (tmp / name / "wh").mkdir(parents=True)
            props = {
                "type": "sql",
                "uri": f"sqlite:///{tmp / name / 'c.db'}",
                "warehouse": (tmp / name / "wh").as_uri(),
            }
            return load_catalog("rlm", **props), props

        def iceberg() -> Result:
            catalog, props = fresh_catalog("ice")
            sync = IcebergSync(f, catalog, IcebergConfig(catalog=props), TOPIC)
            t0 = time.perf_counter()
            r = sync.run_once()
            dt = time.perf_counter() - t0
            t = catalog.load_table(sync.identifier).scan().to_arrow()
            return Result(dt, digest(t), seg_bytes, r.added_rows, {"rows_per_s": r.added_rows / dt})

        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # as rlm backfill's own session does
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-iceberg")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .getOrCreate()
        )
        start_iso = time.strftime("%Y-%m-%d", time.gmtime(day0 / 1000))
        end_iso = time.strftime("%Y-%m-%d", time.gmtime((day0 + (args.days + 1) * DAY_MS) / 1000))

        def spark_backfill() -> Result:
            out = tmp / "parquet"
            shutil.rmtree(out, ignore_errors=True)
            ns = _ap.Namespace(
                config=cfg_path,
                topic=TOPIC,
                start=start_iso,
                end=end_iso,
                output=str(out),
                format="parquet",
                partition_by="date",
                isolation="read_committed",
                include_headers=False,
            )
            t0 = time.perf_counter()
            s = backfill.run(spark, ns)
            dt = time.perf_counter() - t0
            t = pq.read_table(out, columns=["offset", "key", "value"])
            return Result(dt, digest(t), seg_bytes, int(s["rows"]), {"rows_per_s": s["rows"] / dt})

        def iceberg_spark() -> Result:
            from rlm.tables.spark_engine import SparkIcebergSync

            catalog, props = fresh_catalog("ice-spark")
            cfg = IcebergConfig(catalog=props) if args.spark_segments_per_commit is None else IcebergConfig(
                catalog=props, segments_per_commit=args.spark_segments_per_commit)
            sync = SparkIcebergSync(f, catalog, cfg, TOPIC, spark=spark, rlm_config=str(cfg_path))
            t0 = time.perf_counter()
            r = sync.run_once()
            dt = time.perf_counter() - t0
            t = catalog.load_table(sync.identifier).scan().to_arrow()
            return Result(dt, digest(t), seg_bytes, r.added_rows, {"rows_per_s": r.added_rows / dt})

        rows = run_rounds(
            {"iceberg (PyIceberg)": iceberg, "iceberg (Spark engine)": iceberg_spark,
             "rlm backfill (Spark)": spark_backfill},
            args.rounds,
            label="write",
            expect=want,
        )
        rec.section("write", rows)
        rec.add(
            headline(
                rows,
                "rows/s into an Iceberg table (PyIceberg) vs rlm backfill to plain Parquet (Spark)",
                "iceberg (PyIceberg)",
                "rlm backfill (Spark)",
                0.8,
            )
        )
        rec.add(
            headline(
                rows,
                "rows/s into an Iceberg table (Spark engine) vs rlm backfill to plain Parquet (Spark)",
                "iceberg (Spark engine)",
                "rlm backfill (Spark)",
                0.8,
            )
        )

        # one day: the table with partition pruning vs the read core over the whole range
        catalog, props = fresh_catalog("query")
        sync = IcebergSync(f, catalog, IcebergConfig(catalog=props), TOPIC)
        sync.run_once()
        table = catalog.load_table(sync.identifier)
        lo = day0 + (args.days // 2) * DAY_MS
        hi = lo + DAY_MS
        day_ref = ref.filter(pc.and_(pc.greater_equal(ref.column("ts"), lo), pc.less(ref.column("ts"), hi)))
        want_day = digest(day_ref)
        iso = [time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(x / 1000)) for x in (lo, hi)]

        def table_day() -> Result:
            t0 = time.perf_counter()
            t = table.scan(
                row_filter=And(GreaterThanOrEqual("timestamp", iso[0]), LessThan("timestamp", iso[1])),
                selected_fields=("offset", "key", "value", "timestamp"),
            ).to_arrow()
            dt = time.perf_counter() - t0
            return Result(dt, digest(t), 0, t.num_rows)

        def core_day() -> Result:
            t0 = time.perf_counter()
            t = pa.Table.from_batches(list(f.scan(TOPIC, 0, include_headers=False)))
            ts = pc.cast(t.column("timestamp"), pa.int64())
            t = t.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi)))
            dt = time.perf_counter() - t0
            return Result(dt, digest(t), 0, t.num_rows)

        qrows = run_rounds(
            {"table day scan (PyIceberg)": table_day, "read core whole range + filter": core_day},
            args.rounds,
            label="day query",
            expect=want_day,
        )
        rec.section("day_query", qrows)
        rec.facts["day_records"] = day_ref.num_rows
        rec.add(
            headline(
                qrows,
                "one day from the table (partition pruning) vs the remote tier scanned and filtered",
                "table day scan (PyIceberg)",
                "read core whole range + filter",
                5.0,
            )
        )
        f.close()
        rec.save(not args.no_save)
    finally:
        if spark is not None:
            spark.stop()
        kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
