"""Kafka-protocol endpoint benchmark: confluent-kafka consumers via the endpoint vs the broker (not a test).

Starts a real Kafka broker (KRaft, from the jars), produces ``--size-gb`` (default 1) of 1 KB
records into a 4-partition topic (about 6 segments a partition, no compression), then in the same run:

1. ``broker``: one confluent-kafka consumer reads all 4 partitions (the whole size) from the
   broker; then 4 consumers read one partition each, at once (threads; librdkafka releases the
   GIL while fetching);
2. tiers every rolled segment with ``rlm run --once`` (``local`` plugin, the topic metadata
   store, as beside a broker) and deletes the local history with
   DeleteRecords up to the remote end;
3. ``endpoint``: the same consumers read the same offset ranges through ``rlm kafka-serve``
   (its own process, as deployed; merged mode off).

Reported: records/s and MB/s (key + value bytes) per run, and endpoint/broker ratios.

    .venv/bin/python benchmarks/bench_kafka_endpoint.py --size-gb 1
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MB = 1 << 20
PARTITIONS = 4
VALUE = 1000


def produce(bs: str, topic: str, total_bytes: int) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "acks": 1,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    value = b"x" * VALUE
    n = total_bytes // VALUE
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"%012d" % i, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def consume(
    bs: str, topic: str, partitions: list[int], ends: dict[int, int], out: dict[int, tuple[int, int, float]]
) -> None:
    """Read ``partitions`` from offset 0 up to their ``ends`` (exclusive); (records, bytes, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MB,
            "max.partition.fetch.bytes": 8 * MB,
            "queued.max.messages.kbytes": 256 * 1024,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    n = size = 0
    todo = set(partitions)
    t0 = time.perf_counter()
    while todo:
        for m in c.consume(num_messages=10000, timeout=1.0):
            if m.error():
                continue
            n += 1
            size += len(m.value() or b"") + len(m.key() or b"")
            if m.offset() >= ends[m.partition()] - 1:
                todo.discard(m.partition())
    out[partitions[0]] = (n, size, time.perf_counter() - t0)
    c.close()


def run(label: str, bs: str, topic: str, ends: dict[int, int]) -> dict[str, tuple[float, float]]:
    res: dict[str, tuple[float, float]] = {}
    out: dict[int, tuple[int, int, float]] = {}
    consume(bs, topic, list(range(PARTITIONS)), ends, out)  # one consumer, all of the history
    n, size, s = out[0]
    res["1 consumer"] = (n / s, size / MB / s)
    out = {}
    threads = [threading.Thread(target=consume, args=(bs, topic, [p], ends, out)) for p in range(PARTITIONS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    n = sum(v[0] for v in out.values())
    size = sum(v[1] for v in out.values())
    res["4 consumers"] = (n / wall, size / MB / wall)
    for k, (rps, mbs) in res.items():
        print(f"{label:9s} {k:12s} {rps:12,.0f} rec/s {mbs:9.1f} MB/s", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=1.0)
    args = ap.parse_args()

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from fetcher import RemoteFetcher
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from tests.daemon.helpers import create_topic, topic_rlmm
    from tests.services.kafka import KafkaCluster

    cluster = KafkaCluster(nodes=1, name="bench-endpoint", heap="1g").start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    try:
        bs = cluster.bootstrap
        topic = "bench"
        total = int(args.size_gb * (1 << 30))
        segment = min(max(total // PARTITIONS // 6, MB), 256 * MB)  # ~5 rolled segments a partition
        create_topic(bs, topic, partitions=PARTITIONS, **{"segment.bytes": str(segment)})
        t0 = time.perf_counter()
        produce(bs, topic, total)
        print(f"produced {args.size_gb} GB in {time.perf_counter() - t0:.1f} s", flush=True)

        def cfg(work: str) -> Any:
            return load_config(
                None,
                log_dirs=[str(cluster.log_dir)],
                work_dir=str(tmp / work),
                bootstrap_servers=bs,
                storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
                metadata=topic_rlmm(bs, tmp / work),
                topics=[{"pattern": topic, "remote.storage.enable": True}],
                http={"enabled": False},
            )

        t0 = time.perf_counter()
        d = Daemon(cfg("daemon"), once=True).start()
        assert d.run_once() == 0
        d.stop()
        print(f"tiered in {time.perf_counter() - t0:.1f} s", flush=True)
        fetcher = RemoteFetcher.from_config(cfg("reader"))
        deadline = time.monotonic() + 60
        while topic not in fetcher.topics() and time.monotonic() < deadline:
            time.sleep(0.5)
        ends = {p: fetcher.plan(topic, p).log_end for p in range(PARTITIONS)}
        print(f"remote ends {ends}", flush=True)
        broker = run("broker", bs, topic, ends)
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.delete_records([TopicPartition(topic, p, e) for p, e in ends.items()]).values():
            f.result(60)
        fetcher.close()
        conf = {
            "log_dirs": [str(cluster.log_dir)],
            "work_dir": str(tmp / "serve"),
            "bootstrap_servers": bs,
            "storage": {"plugin": "local", "config": {"root": str(tmp / "remote")}},
            "metadata": topic_rlmm(bs, tmp / "serve"),
            "read": {"kafka_merged": False},
            "log_level": "warning",
        }
        (tmp / "serve.yaml").write_text(yaml.safe_dump(conf))
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlm.cli",
                "kafka-serve",
                "--config",
                str(tmp / "serve.yaml"),
                "--listener",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert serve.stdout is not None
            line = next(ln for ln in serve.stdout if ln.startswith("kafka endpoint listening on "))
            endpoint = run("endpoint", line.split()[-1], topic, ends)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(60)
        for k in broker:
            print(f"ratio     {k:12s} {endpoint[k][0] / broker[k][0]:.2f}x", flush=True)
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
