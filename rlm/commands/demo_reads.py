"""The read half of ``rlm demo``: the tiered history read back three ways, as users would read it.

Each reader is what a user would run next, in-process: ``rlm fetch`` (the command itself), a
confluent-kafka consumer through the Kafka-protocol endpoint, and a Spark SQL count over the
``kafka-tiered`` source. A reader whose extra is missing (``kafka``: kio; ``spark``: pyspark and a
JDK) says so in one line and is skipped: the demo must run on the core install alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm.config import DaemonConfig


@dataclass(frozen=True)
class KafkaRead:
    """What the consumer saw: the watermarks and the records it polled."""

    low: int
    high: int
    records: int
    first_key: bytes | None


def show_fetch(config_file: Path, topic: str, partition: int, offset: int, count: int) -> None:
    """Print, then run, ``rlm fetch --format text`` on ``config_file`` as the command line does."""
    from rlm.commands import fetch

    argv = ["--config", str(config_file), "--topic", topic, "--partition", str(partition),
            "--offset", str(offset), "--count", str(count), "--format", "text"]
    print("   a) rlm fetch " + " ".join(argv).replace(str(config_file), "rlm.yaml"), flush=True)
    parser = argparse.ArgumentParser(prog="rlm")
    fetch.register(parser.add_subparsers())
    args = parser.parse_args(["fetch", *argv])
    args.func(args)


def kafka_missing() -> str | None:
    from rlm.commands.kafka_serve import kafka_extra_missing

    return kafka_extra_missing()


def consume(config: DaemonConfig, topic: str, partition: int, max_records: int) -> KafkaRead:
    """Start the Kafka endpoint on a free port and read ``topic-partition`` from offset 0 with
    confluent-kafka (``assign``, no group commits), up to ``max_records`` records."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from fetcher import RemoteFetcher
    from rlm.commands.kafka_serve import start_kafka_listener

    with RemoteFetcher.from_config(config) as f:
        listener = start_kafka_listener(f, "127.0.0.1", 0)
        try:
            c = Consumer({"bootstrap.servers": listener.bootstrap, "group.id": "rlm-demo",
                          "enable.auto.commit": False, "log_level": 3})
            try:
                tp = TopicPartition(topic, partition, OFFSET_BEGINNING)
                low, high = c.get_watermark_offsets(tp, timeout=30)
                c.assign([tp])
                n, first = 0, None
                while n < min(max_records, high - low):
                    msgs = c.consume(num_messages=min(500, max_records - n), timeout=10)
                    if not msgs:
                        break
                    for m in msgs:
                        if m.error() is None:
                            first = m.key() if n == 0 else first
                            n += 1
                return KafkaRead(low, high, n, first)
            finally:
                c.close()
        finally:
            listener.close()


def spark_missing() -> str | None:
    """Why Spark cannot run here (no pyspark, no JDK), or ``None``."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "no pyspark (pip install 'kafka-rlm-sidecar[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no JDK (java on PATH or JAVA_HOME) for Spark"
    return None


class SparkReader:
    """A local Spark session started in a background thread when the demo begins.

    The JVM's start and the source's lookup and schema (each a Python worker that imports the
    ``kafka-tiered`` source) overlap writing and tiering instead of following them; the count
    itself runs in the background too, from :meth:`count` on (once the tiered data and the config
    file exist), while the demo's other two reads run. Together that keeps the demo under 30 s.
    The source is not registered by hand: the installed top-level module ``pyspark_kafka_tiered``
    registers it (wheel and editable installs alike).
    """

    def __init__(self, config_file: Path, topic: str) -> None:
        self.view_sql = (f"CREATE TEMPORARY VIEW {topic} USING `kafka-tiered` OPTIONS (`rlm.config` "
                         f"'{config_file}', subscribe '{topic}')")
        self.query = f"SELECT partition, count(*) AS n FROM {topic} GROUP BY partition ORDER BY partition"
        self._spark: Any = None
        self._rows: list[tuple[int, int]] = []
        self._error: BaseException | None = None
        self._thread = self._background(self._start)

    def _background(self, fn: Any) -> threading.Thread:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # raised again by rows(), in the main thread
                self._error = e

        t = threading.Thread(target=run, name="rlm-demo-spark", daemon=True)
        t.start()
        return t

    def _start(self) -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        # A short-lived local session: C1-only JIT and the serial GC cut the JVM's start-up CPU,
        # no UI, no adaptive planning and one shuffle partition for a two-row result.
        self._spark = (
            SparkSession.builder.master("local[2]").appName("rlm-demo")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1").getOrCreate())
        self._spark.sparkContext.setLogLevel("ERROR")
        # Resolving the view needs only its options, not the config file (not written yet).
        self._spark.sql(self.view_sql)

    def _count(self) -> None:
        self._rows = [(int(r["partition"]), int(r["n"])) for r in self._spark.sql(self.query).collect()]

    def count(self) -> None:
        """Start the count (in the background) once the session is up: call after tiering."""
        started = self._thread

        def after_start() -> None:
            started.join()
            if self._error is None:
                self._count()

        self._thread = self._background(after_start)

    def rows(self) -> tuple[str, list[tuple[int, int]]]:
        """The SQL run and the rows per partition, once the count is done."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return f"{self.view_sql}; {self.query}", self._rows

    def stop(self) -> None:
        self._thread.join()
        if self._spark is not None:
            self._spark.stop()
