"""Cold read commands against Kafka's own tools (issue 39; not a test).

The operator's path: a real broker (one KRaft node), the ``__remote_log_metadata`` topic at
Kafka's default 50 partitions, a topic of ``--partitions`` partitions. Partition 0's rolled
segments are tiered for real by ``rlm run --once`` (``local`` storage plugin); the metadata of
``--segments`` tiered segments in all spread over every partition is written to the metadata
topic too (records in Kafka's format, produced straight to the partition Kafka's partitioner
picks; their objects are not stored: only their metadata weighs on a cold read). Then, in the
same run, interleaved rounds (one warm-up, then ``--rounds``), each case a **new process**:

* ``rlm fetch --count 1 --format json`` of one tiered record of partition 0, with a fresh work
  dir each time (``rlm cold``: no metadata snapshot, no index cache) and with the work dir the
  previous run left (``rlm warm dir``: snapshots and cached indexes), against Kafka's console
  consumer (``org.apache.kafka.tools.consumer.ConsoleConsumer``, what ``kafka-console-consumer.sh``
  runs, same jars and heap) reading the same record from the broker;
* ``rlm offsets --json`` for a timestamp inside the tiered range, against ``GetOffsetShell``.

Python runs from bytecode as installed: ``pip install`` (and the container image) compile every
module's ``.pyc`` at install time, but this repository's venv is installed by ``uv`` without, and
a shell may set ``PYTHONDONTWRITEBYTECODE`` (the image does, over its compiled files). So ``rlm``
gets a bytecode cache of its own (``PYTHONPYCACHEPREFIX`` in the run's temp dir, filled by the
warm-up round). ``rlm cold, no .pyc`` runs the same cold command compiling every module from
source each time, for context.

Every answer is checked: the record's offset, key and value, and the offset found, must equal
the broker tool's, or the benchmark fails. Headline = median of per-round time ratios (the
tool's seconds / ours: > 1 means ours is faster). Raw results go to
``docs/data/bench-cold-fetch.json`` unless ``--no-save``.

    .venv/bin/python benchmarks/bench_cold_fetch.py                       # 10,000 segments, 100 partitions
    .venv/bin/python benchmarks/bench_cold_fetch.py --segments 1000 --partitions 20 --rounds 3
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import BenchFailure, Recorder, Result, headline, quiet_logs, run_rounds

TOPIC = "bench-cold"
METADATA_TOPIC = "__remote_log_metadata"
METADATA_PARTITIONS = 50  # Kafka's default
T0 = 1_700_000_000_000  # record i is stamped T0 + i seconds


def produce(bs: str, records: int) -> None:
    """``records`` printable records to partition 0 (the console consumer prints them as they are)."""
    from confluent_kafka import Producer

    # idempotent: batches retried while the new topic's leader settles stay in order, so offsets
    # follow the timestamps and a lookup in the middle of the range searches the indexes
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "compression.type": "none", "acks": "all",
                  "enable.idempotence": True})
    for i in range(records):
        p.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}-".encode() + b"x" * 600, partition=0,
                  timestamp=T0 + i * 1000)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60) != 0:
        raise BenchFailure("the producer did not deliver every record")


def synthetic_metadata(bs: str, topic_id: Any, partitions: int, segments: int) -> int:
    """``segments`` finished segments (two records each) spread over partitions 1.. of the topic,
    produced to the metadata partition Kafka's partitioner maps each to; returns records written."""
    from confluent_kafka import Producer

    from rlm.types import (
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        RemoteLogSegmentMetadataUpdate,
        RemoteLogSegmentState,
        TopicIdPartition,
    )
    from rlmm.partitioner import metadata_partition
    from rlmm.serde import serialize

    others = [TopicIdPartition(topic_id, TOPIC, p) for p in range(1, partitions)] or []
    if not others or segments <= 0:
        return 0
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "enable.idempotence": True, "acks": "all"})
    n = 0
    for i in range(segments):
        tp = others[i % len(others)]
        start = (i // len(others)) * 1000
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), start, start + 999, T0, 99, T0,
                                      1 << 20, ((0, start),))
        done = RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, T0,
                                              RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 99)
        mp = metadata_partition(tp, METADATA_PARTITIONS)
        for event in (md, done):
            p.produce(METADATA_TOPIC, value=serialize(event), partition=mp)
            n += 1
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60) != 0:
        raise BenchFailure("the metadata producer did not deliver every record")
    return n


def record_timestamp(bs: str, offset: int) -> int:
    """The timestamp of partition 0's record at ``offset``, as the broker has it."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-cold-fetch", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, offset)])
        msg = c.poll(30)
        if msg is None or msg.error() is not None or msg.offset() != offset:
            raise BenchFailure(f"the broker did not return offset {offset}")
        return int(msg.timestamp()[1])
    finally:
        c.close()


def timed(cmd: list[str],
          env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    took = time.perf_counter() - t
    if res.returncode != 0:
        raise BenchFailure(f"{' '.join(cmd[:6])}... exited {res.returncode}: {res.stderr[-2000:]}")
    return took, res


def java_tool(kafka: Any, main_class: str, *args: str) -> list[str]:
    """What ``bin/kafka-run-class.sh`` runs for a tool: its default heap (256M) and GC flags."""
    from tests.services.proc import java

    return [java(), "-Xmx256M", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={kafka._base / 'log4j2.properties'}", "-cp", kafka.classpath,
            main_class, *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100, help="partitions of the data topic")
    ap.add_argument("--segments", type=int, default=10_000, help="tiered segments' metadata in all")
    ap.add_argument("--records", type=int, default=6000, help="records of partition 0 (600 B each)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-cold-fetch.json")
    ap.add_argument("--hold", action="store_true",
                    help="set up, print the commands each case runs, wait for Enter (to profile one), stop")
    args = ap.parse_args()
    quiet_logs()

    import yaml
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from tests.services.kafka import KafkaCluster

    rec = Recorder("cold-fetch", args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cold-fetch-"))
    kafka = KafkaCluster(nodes=1, name="bench-cold-fetch", heap="1g").start()
    try:
        bs = kafka.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        # retention.ms -1: the records are stamped in the past; the broker must keep them to compare
        conf = {"segment.bytes": str(1 << 20), "retention.ms": "-1"}
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config=conf)])[TOPIC].result(60)
        produce(bs, args.records)
        metadata = {"manager": "topic", "config": {
            "remote.log.metadata.topic.num.partitions": METADATA_PARTITIONS,
            "remote.log.metadata.topic.replication.factor": 1}}
        writer = {"log_dirs": [str(kafka.log_dir)], "work_dir": str(tmp / "writer"), "bootstrap_servers": bs,
                  "storage": {"plugin": "local", "config": {"root": str(tmp / "remote")}},
                  "metadata": metadata, "http": {"enabled": False}, "log_level": "warning",
                  "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "retention.ms": -1,
                              "retention.bytes": -1}]}
        t = time.perf_counter()
        d = Daemon(load_config(None, **writer), once=True).start()
        if d.run_once() != 0 or not d.stop():
            raise BenchFailure("rlm run --once failed")
        print(f"tiered partition 0 in {time.perf_counter() - t:.1f}s", flush=True)

        desc = admin.describe_topics(__import__("confluent_kafka").TopicCollection([TOPIC]))[TOPIC].result(30)
        from rlm.types import KafkaUuid

        topic_id = KafkaUuid.from_bits(desc.topic_id.get_most_significant_bits(),
                                       desc.topic_id.get_least_significant_bits())
        t = time.perf_counter()
        written = synthetic_metadata(bs, topic_id, args.partitions, args.segments)
        print(f"{args.segments} segments' metadata ({written} records) over {args.partitions - 1} partitions "
              f"in {time.perf_counter() - t:.1f}s", flush=True)

        # the record: the middle of partition 0's tiered range
        from fetcher import RemoteFetcher

        reader = {**writer, "work_dir": str(tmp / "reader")}
        with RemoteFetcher.from_config(load_config(None, **reader), load_all=False) as f:
            plan = f.plan(TOPIC, 0)
        if plan.log_end <= 0:
            raise BenchFailure("nothing of partition 0 was tiered")
        offset = plan.log_end // 2
        ts = record_timestamp(bs, offset)  # the first record at or after it is tiered too
        shutil.rmtree(tmp / "reader", ignore_errors=True)
        rec.facts.update(metadata_partitions=METADATA_PARTITIONS, partitions=args.partitions,
                         segments=args.segments, metadata_records=written, tiered_end=plan.log_end,
                         offset=offset, timestamp=ts, tiered_segments_partition_0=len(plan.segments),
                         bytecode="rlm: a .pyc cache (PYTHONPYCACHEPREFIX), filled by the warm-up round")

        env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
        no_pyc = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
        no_pyc.pop("PYTHONPYCACHEPREFIX", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")  # see the module's docstring
        rlm = [sys.executable, "-m", "rlm.cli"]

        def config(name: str, fresh: bool) -> Path:
            work = tmp / name
            if fresh:
                shutil.rmtree(work, ignore_errors=True)
            path = tmp / f"{name}.yaml"
            path.write_text(yaml.safe_dump({**reader, "work_dir": str(work)}))
            return path

        def digest(o: int, key: bytes | None, value: bytes | None) -> str:
            return f"{o}:{(key or b'').hex()}:{(value or b'').hex()}"

        def rlm_fetch(name: str, fresh: bool, pyc: bool = True) -> Result:
            path = config(name, fresh)
            took, res = timed([*rlm, "fetch", "--config", str(path), "--topic", TOPIC, "--partition", "0",
                               "--offset", str(offset), "--count", "1", "--format", "json"],
                              env if pyc else no_pyc)
            r = json.loads(res.stdout.splitlines()[0])
            return Result(took, digest(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])),
                          records=1)

        def console() -> Result:
            took, res = timed(java_tool(
                kafka, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bs,
                "--topic", TOPIC, "--partition", "0", "--offset", str(offset), "--max-messages", "1",
                "--property", "print.key=true", "--property", "print.offset=true",
                "--property", "key.separator=|"))
            line = next(ln for ln in res.stdout.splitlines() if ln.startswith("Offset:"))
            head, key, value = line.split("|", 2)
            found = digest(int(head.removeprefix("Offset:")), key.encode(), value.encode())
            return Result(took, found, records=1)

        def rlm_offsets(name: str, fresh: bool, pyc: bool = True) -> Result:
            path = config(name, fresh)
            took, res = timed([*rlm, "offsets", "--config", str(path), "--topic", TOPIC, "--partition", "0",
                               "--timestamp", str(ts), "--json"], env if pyc else no_pyc)
            r = json.loads(res.stdout.splitlines()[0])
            return Result(took, f"{r['offset']}", extra={"source": r["source"]})

        def get_offset_shell() -> Result:
            took, res = timed(java_tool(kafka, "org.apache.kafka.tools.GetOffsetShell",
                                        "--bootstrap-server", bs, "--topic-partitions", f"{TOPIC}:0",
                                        "--time", str(ts)))
            line = next(ln for ln in res.stdout.splitlines() if ln.startswith(f"{TOPIC}:0:"))
            return Result(took, line.rsplit(":", 1)[1])

        if args.hold:  # profile one case by hand: the same commands, broker and data, kept up
            pyc = f"env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX={env['PYTHONPYCACHEPREFIX']}"
            print("rlm fetch:", pyc, " ".join([*rlm, "fetch", "--config", str(config("fetch-cold", True)),
                                               "--topic", TOPIC, "--partition", "0", "--offset", str(offset),
                                               "--count", "1", "--format", "json"]))
            off_cfg = str(config("offsets-cold", True))
            print("rlm offsets:", pyc, " ".join([*rlm, "offsets", "--config", off_cfg, "--topic", TOPIC,
                                                 "--partition", "0", "--timestamp", str(ts), "--json"]))
            print("GetOffsetShell:", " ".join(java_tool(kafka, "org.apache.kafka.tools.GetOffsetShell",
                                                        "--bootstrap-server", bs, "--topic-partitions",
                                                        f"{TOPIC}:0", "--time", str(ts))), flush=True)
            input("holding the broker; Enter stops it\n")
            return 0
        fetch_rows = run_rounds({
            "console consumer": console,
            "rlm cold": lambda: rlm_fetch("fetch-cold", True),
            "rlm warm dir": lambda: rlm_fetch("fetch-warm", False),
            "rlm cold, no .pyc": lambda: rlm_fetch("fetch-cold", True, pyc=False),
        }, args.rounds, label="fetch one record")  # every answer must equal the console consumer's
        rec.section("fetch", fetch_rows)
        rec.add(headline(fetch_rows, "cold rlm fetch of one record (new work dir)", "rlm cold",
                         "console consumer", 1.0, ">= 1.0x (Kafka's console consumer's time or less)"))
        rec.add(headline(fetch_rows, "rlm fetch of one record, work dir kept", "rlm warm dir",
                         "console consumer", None))
        rec.add(headline(fetch_rows, "cold rlm fetch, every module compiled from source", "rlm cold, no .pyc",
                         "console consumer", None))
        offsets_rows = run_rounds({
            "GetOffsetShell": get_offset_shell,
            "rlm cold": lambda: rlm_offsets("offsets-cold", True),
            "rlm warm dir": lambda: rlm_offsets("offsets-warm", False),
            "rlm cold, no .pyc": lambda: rlm_offsets("offsets-cold", True, pyc=False),
        }, args.rounds, label="offset for a timestamp")  # ... and GetOffsetShell's
        if any(r["cases"]["rlm cold"]["source"] != "remote" for r in offsets_rows):
            raise BenchFailure("rlm offsets did not answer from remote storage")
        rec.section("offsets", offsets_rows)
        rec.add(headline(offsets_rows, "cold rlm offsets (new work dir)", "rlm cold", "GetOffsetShell", 1.0,
                         ">= 1.0x (GetOffsetShell's time or less)"))
        rec.add(headline(offsets_rows, "rlm offsets, work dir kept", "rlm warm dir", "GetOffsetShell", None))
        rec.add(headline(offsets_rows, "cold rlm offsets, every module compiled from source",
                         "rlm cold, no .pyc", "GetOffsetShell", None))
        rec.save(not args.no_save)
    finally:
        kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
