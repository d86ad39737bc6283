"""``rlm demo [--dir DIR] [--size-mb N]``: the whole product on one machine, no Kafka needed.

1. Writes a realistic broker log dir with :class:`rlm.log.writer.PartitionWriter`: several topics,
   compressed batches, idempotent and transactional producers (commits and aborts, one open),
   a leader-epoch change, a compacted topic (tiered only below the broker cleaner's checkpoint:
   none here, no cleaner ran).
2. Runs the daemon once (``rlm run --once``) standalone with the ``local`` storage plugin and the
   embedded ``file`` metadata store.
3. Prints ``rlm status`` and writes the ``rlm.yaml`` it used, to continue with.
4. Reads the history back three ways (:mod:`rlm.commands.demo_reads`): ``rlm fetch``, a Kafka
   consumer (confluent-kafka) through the Kafka-protocol endpoint, and a Spark SQL count when
   pyspark and a JDK are installed (the Spark session starts in the background as the demo
   begins, so its start-up overlaps steps 1-3); then prints the next commands to try.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from rlm.errors import ConfigError

TOPICS = (  # name, partitions, share of the data, compression
    ("orders", 2, 0.5, "zstd"),
    ("payments", 1, 0.25, "none"),
    ("clicks", 1, 0.25, "lz4"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="write a demo log dir, tier it, read it back (rlm fetch, a Kafka consumer, Spark SQL)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", type=Path, help="empty or new directory for the demo (default: a new temp dir)")
    p.add_argument("--size-mb", type=int, default=20, help="approximate data size (default 20, max 500)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark SQL read (starts a JVM)")
    p.set_defaults(func=demo)


def _values(topic: str, rnd: random.Random, n: int = 997) -> list[str]:
    """A pool of realistic JSON values (with an ``{i}`` slot); cycling through it keeps writing fast."""
    out = []
    for _ in range(n):
        if topic == "orders":
            items = json.dumps([f"sku-{rnd.randrange(900)}" for _ in range(rnd.randrange(1, 5))])
            out.append(
                f'{{"order_id": {{i}}, "customer": "c{rnd.randrange(5000)}", '
                f'"amount_cents": {rnd.randrange(100, 99999)}, "items": {items}}}'
            )
        elif topic == "payments":
            out.append(
                f'{{"payment_id": {{i}}, "order_id": {rnd.randrange(10**6)}, '
                f'"status": "{rnd.choice(["ok", "ok", "declined"])}"}}'
            )
        else:
            out.append(
                f'{{"click": {{i}}, "session": "s{rnd.randrange(10**5)}", '
                f'"page": "/p/{rnd.randrange(400)}", "ms": {rnd.randrange(9000)}}}'
            )
    return out


def write_demo_log_dir(log_dir: Path, size_mb: int, *, seed: int = 42) -> dict[str, int]:
    """Write the demo topics; returns bytes written per partition directory name."""
    from rlm.log.checkpoints import MetaProperties
    from rlm.log.records import Compression
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
    from rlm.types import KafkaUuid, TopicPartition

    rnd = random.Random(seed)
    now = int(time.time() * 1000)
    ends: list[tuple[TopicPartition, int]] = []
    sizes: dict[str, int] = {}
    seg_bytes = max(256 * 1024, min(8 << 20, size_mb * 1024 * 1024 // 24))
    for topic, parts, share, codec in TOPICS:
        topic_id = KafkaUuid.random()
        compression = {"zstd": Compression.ZSTD, "lz4": Compression.LZ4, "none": Compression.NONE}[codec]
        for p in range(parts):
            target = int(size_mb * 1024 * 1024 * share / parts)
            pdir = log_dir / f"{topic}-{p}"
            start_ts = now - 3 * 24 * 3600 * 1000
            w = PartitionWriter(pdir, topic_id=topic_id, config=WriterConfig(segment_bytes=seg_bytes))
            i, batch_no, pid, written = 0, 0, 1000 + p, 0
            pool = _values(topic, rnd)
            while written < target:
                ts = start_ts + (now - start_ts) * written // max(1, target)
                recs = [
                    (
                        f"{topic[0]}{i + k}".encode(),
                        pool[(i + k) % len(pool)].replace("{i}", str(i + k)).encode(),
                        (),
                        ts + k,
                    )
                    for k in range(200)
                ]
                i += 200
                batch_no += 1
                if topic == "payments":
                    h = w.append(recs, producer_id=pid, producer_epoch=0, transactional=True, now=ts)
                    if batch_no % 3 == 0:
                        w.end_transaction(pid, 0, commit=batch_no % 9 != 0, now=ts)
                    if batch_no == 40:
                        w.set_leader_epoch(1)
                else:
                    h = w.append(recs, compression=compression, producer_id=pid, producer_epoch=0, now=ts)
                written += h.size
            if topic == "payments":  # leave one transaction open: the LSO stays below the log end
                w.append(
                    [(b"open", b'{"status": "pending"}', (), now)],
                    producer_id=pid + 50,
                    producer_epoch=0,
                    transactional=True,
                    now=now,
                )
            w.close()
            ends.append((TopicPartition(topic, p), w.log_end_offset))
            sizes[pdir.name] = _dir_size(w.segments, pdir)
    cdir = log_dir / "user-profiles-0"
    w = PartitionWriter(cdir, topic_id=KafkaUuid.random(), config=WriterConfig(segment_bytes=seg_bytes))
    w.append([(f"u{k}".encode(), b'{"tier": "gold"}') for k in range(100)])
    w.close()
    ends.append((TopicPartition("user-profiles", 0), w.log_end_offset))
    write_log_dir_files(log_dir, ends, meta=MetaProperties(1, "rlm-demo-cluster-00001", 1))
    return sizes


def _dir_size(segments: list[int], pdir: Path) -> int:
    return sum((pdir / f"{b:020d}.log").stat().st_size for b in segments if (pdir / f"{b:020d}.log").exists())


def demo_config(root: Path) -> dict[str, Any]:
    return {
        "log_dirs": [str(root / "kafka-logs")],
        "work_dir": str(root / "rlm-work"),
        "storage": {"plugin": "local", "config": {"root": str(root / "remote-storage")}},
        "metadata": {"manager": "file", "config": {"dir": str(root / "rlm-work" / "metadata")}},
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
        "topics": [{"pattern": "user-profiles", "cleanup.policy": "compact"}],
        "http": {"enabled": False},
        "log_format": "console",
        "log_level": "warning",
        "thread_pool_size": 4,
    }


def demo(args: argparse.Namespace) -> int:
    if not 1 <= args.size_mb <= 500:
        raise ConfigError("--size-mb must be between 1 and 500")
    root: Path = args.dir or Path(tempfile.mkdtemp(prefix="rlm-demo-"))
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"{root}: demo directory must be empty or new")
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    config_file = root / "rlm.yaml"
    spark, spark_skipped = _start_spark(config_file, args.no_spark)
    try:
        failed = _tier_and_read(root, args.size_mb, config_file, spark, spark_skipped, t0)
    finally:
        if spark is not None:
            spark.stop()
    rlm = rlm_command()
    print(f"done in {time.monotonic() - t0:.1f}s. Next, try:")
    for cmd in next_steps(rlm, config_file):
        print(f"   {cmd}")
    return 0 if failed == 0 else 1


def rlm_command() -> str:
    """How the user's shell runs this ``rlm``: ``rlm`` when that name on PATH is this very
    installation, else the path of the ``rlm`` script beside this interpreter (``.venv/bin/rlm``,
    relative to the current directory when under it), else ``python -m rlm.cli``. (``make demo``
    runs the venv's ``rlm`` without activating the venv: ``rlm`` alone would not be found.)"""
    here = Path(sys.executable).parent / "rlm"
    on_path = shutil.which("rlm")
    if on_path is not None and (not here.exists() or Path(on_path).resolve() == here.resolve()):
        return "rlm"
    if not here.exists():
        return f"{sys.executable} -m rlm.cli"
    rel = os.path.relpath(here, Path.cwd())
    return rel if not rel.startswith("..") else str(here)


def next_steps(rlm: str, config_file: Path) -> list[str]:
    """The "Next, try" commands, as the user's shell can run them (``rlm`` from :func:`rlm_command`)."""
    return [f"{rlm} status --config {config_file}",
            f"{rlm} fetch --config {config_file} --topic payments --offset 0 --count 5 "
            "--isolation read_committed --format text",
            f"{rlm} offsets --config {config_file} --topic orders --timestamp 1d-ago",
            f"{rlm} serve --config {config_file} --kafka-listener 127.0.0.1:9466   "
            "# then: kcat -b 127.0.0.1:9466 -t orders -p 0 -o beginning -c 5",
            f"{rlm} verify --config {config_file} --deep"]


def _tier_and_read(root: Path, size_mb: int, config_file: Path, spark: Any, spark_skipped: str | None,
                   t0: float) -> int:
    """Steps 1-4; returns the number of partitions ``rlm run --once`` failed on."""
    from rlm.commands.status import render_table
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from rlm.daemon.status import read_status
    from rlm.logging_setup import configure_logging

    print(
        f"1. writing a Kafka log dir (~{size_mb} MB) with rlm.log's PartitionWriter: "
        f"{root / 'kafka-logs'}"
    )
    sizes = write_demo_log_dir(root / "kafka-logs", size_mb)
    for name, size in sorted(sizes.items()):
        print(f"   {name:<12} {size / 1e6:7.1f} MB")
    print("   user-profiles-0 (compacted: nothing to tier until the broker's cleaner has cleaned it)")
    print(
        "2. rlm run --once (standalone, local storage plugin, file metadata store) "
        f"[{time.monotonic() - t0:.1f}s]"
    )
    cfg = load_config(None, **demo_config(root))
    configure_logging(cfg.log_format, cfg.log_level)
    daemon = Daemon(cfg, once=True).start()
    failed = daemon.run_once()
    daemon.stop()
    segs, nbytes = daemon.metrics.copied_totals()
    print(f"   copied {segs} segments, {nbytes / 1e6:.1f} MB to {root / 'remote-storage'}")
    print(f"3. rlm status --work-dir {cfg.work_dir}   [{time.monotonic() - t0:.1f}s]")
    print(render_table(read_status(cfg.work_dir)))
    config_file.write_text(yaml.safe_dump(demo_config(root), sort_keys=False))
    print(f"   the configuration used: {config_file}")
    if spark is not None:
        spark.count()  # in the background, beside the other two reads
    _read_three_ways(cfg, config_file, spark, spark_skipped, t0)
    return failed


def _start_spark(config_file: Path, no_spark: bool) -> tuple[Any, str | None]:
    """The Spark reader, starting in the background now, or why it is skipped."""
    from rlm.commands import demo_reads

    missing = "--no-spark" if no_spark else demo_reads.spark_missing()
    if missing is not None:
        return None, missing
    return demo_reads.SparkReader(config_file, "orders"), None


def _read_three_ways(cfg: Any, config_file: Path, spark: Any, spark_skipped: str | None, t0: float) -> None:
    from rlm.commands import demo_reads

    print(f"4. the history read back from remote storage   [{time.monotonic() - t0:.1f}s]")
    demo_reads.show_fetch(config_file, "orders", 0, 0, 3)
    missing = demo_reads.kafka_missing()
    if missing is not None:
        print(f"   b) Kafka consumer: skipped ({missing})")
    else:
        k = demo_reads.consume(cfg, "orders", 0, 2000)
        print(f"   b) confluent-kafka consumer through the Kafka endpoint (rlm serve --kafka-listener): "
              f"orders-0 offsets {k.low}..{k.high}, polled {k.records} records, first key {k.first_key!r}"
              f"   [{time.monotonic() - t0:.1f}s]")
    if spark is None:
        print(f"   c) Spark SQL: skipped ({spark_skipped})")
        return
    sql, rows = spark.rows()
    print(f"   c) Spark SQL (no register call: the installed module pyspark_kafka_tiered registers "
          f"the source): {sql.replace(str(config_file), 'rlm.yaml')}")
    for partition, n in rows:
        print(f"      orders partition {partition}: {n} rows")
    print(f"      [{time.monotonic() - t0:.1f}s]")
