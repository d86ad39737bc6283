"""Daemon load benchmark: one full scheduler pass over 1,000 partitions and 100,000 remote segments.

Scenario (issue 13): a standalone log dir of ``--partitions`` partitions of one topic, each with
only its active segment locally (offsets ``[segments * 1000, +50)``) and ``--segments`` remote
segments in total (``COPY_SEGMENT_FINISHED``, 1,000 offsets each, leader epoch 0 from offset 0)
in the embedded file metadata store. Remote retention is off, so a pass copies and deletes
nothing: it is the steady-state cost of the scheduler visiting every partition (local log view,
LSO, copy planning) and of the expiry scan (list every remote segment, lineage check, coverage
gaps), plus the status board written after each partition run.

Each scale runs in a child process (clean peak RSS) through the real daemon, ``Daemon(once=True)``:

* ``start``: preflight, loading the metadata store (replaying its log), discovering the log dirs;
* ``pass``: ``run_once()``: every partition's task on the pool, once (wall time, CPU of all threads);
* ``peak RSS`` of the child;
* the named alternative in the same child: ``bare listing``, the same metadata read straight from
  the store (``list_remote_log_segments`` for every partition, no daemon): the floor of the scan.

The baseline scale (``--baseline``, default 100 partitions / 10,000 segments) runs in the same run,
so the report shows how the pass scales. Not run by the tests (``tests/daemon/test_load.py`` runs
one reduced pass and checks its outcome)::

    .venv/bin/python benchmarks/bench_load.py [--partitions 1000 --segments 100000] \\
        [--json docs/data/load-daemon.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import google_crc32c

from rlm.log.checkpoints import EpochEntry, MetaProperties, encode_leader_epoch_checkpoint
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    TopicPartition,
)
from rlmm.file_log import FRAME, LOG_FILE, MAGIC
from rlmm.serde import serialize

TOPIC = "load"
SEG_OFFSETS = 1000
SEG_BYTES = 1 << 20
NODE_ID = 1


def synthesize(root: Path, partitions: int, segments: int) -> list[TopicIdPartition]:
    """Writes ``root/logs`` (active segments only) and ``root/work/metadata`` (the file store's log,
    one fsync at the end): ``segments`` finished remote segments spread evenly over the partitions."""
    logs, meta = root / "logs", root / "work" / "metadata"
    meta.mkdir(parents=True)
    tid = KafkaUuid.random()
    per = [segments // partitions + (1 if p < segments % partitions else 0) for p in range(partitions)]
    tips, ends = [], []
    now = int(time.time() * 1000)
    for p, n in enumerate(per):
        pdir = logs / f"{TOPIC}-{p}"
        w = PartitionWriter(pdir, topic_id=tid, start_offset=n * SEG_OFFSETS, config=WriterConfig())
        w.append([(b"k%d" % i, b"v" * 20) for i in range(50)], now=now)
        w.close()
        # the epoch began at offset 0: the remote segments are on the lineage and get checked
        (pdir / "leader-epoch-checkpoint").write_bytes(encode_leader_epoch_checkpoint([EpochEntry(0, 0)]))
        tips.append(TopicIdPartition(tid, TOPIC, p))
        ends.append((TopicPartition(TOPIC, p), w.log_end_offset))
    write_log_dir_files(logs, ends, meta=MetaProperties(1, "load-bench-cluster-0001", NODE_ID))
    with open(meta / LOG_FILE, "wb", buffering=8 << 20) as f:
        f.write(MAGIC)
        for tip, n in zip(tips, per, strict=True):
            for s in range(n):
                start = s * SEG_OFFSETS
                md = RemoteLogSegmentMetadata(
                    RemoteLogSegmentId.generate_new(tip),
                    start,
                    start + SEG_OFFSETS - 1,
                    now - 1000,
                    NODE_ID,
                    now,
                    SEG_BYTES,
                    ((0, start),),
                )
                done = RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, now, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, NODE_ID
                )
                for ev in (md, done):
                    payload = serialize(ev)
                    f.write(FRAME.pack(len(payload), google_crc32c.value(payload)))
                    f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    return tips


def daemon_config(root: Path, threads: int) -> Any:
    from rlm.config import load_config

    return load_config(
        None,
        log_dirs=[str(root / "logs")],
        work_dir=str(root / "work"),
        thread_pool_size=threads,
        http={"enabled": False},
        topic_defaults={"remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1},
    )


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_pass(root: Path, threads: int) -> dict[str, Any]:
    """One ``--once`` pass of the real daemon over ``root``; returns timings and what it saw."""
    from rlm.daemon.service import Daemon

    cfg = daemon_config(root, threads)
    c0, t0 = cpu_s(), time.perf_counter()
    d = Daemon(cfg, once=True).start()
    t1, c1 = time.perf_counter(), cpu_s()
    try:
        failed = d.run_once()
        t2, c2 = time.perf_counter(), cpu_s()
        assert d.ctx is not None
        status = d.ctx.status.to_dict()
        managed = len(d.managed())
    finally:
        d.stop()
    parts = status["partitions"]
    visited = sum(1 for st in parts.values() if int(st.get("last_run_ms", -1)) > 0)
    return {
        "start_s": t1 - t0,
        "start_cpu_s": c1 - c0,
        "pass_s": t2 - t1,
        "pass_cpu_s": c2 - c1,
        "failed_tasks": failed,
        "managed": managed,
        "visited": visited,
        "remote_segments_seen": sum(int(st.get("remote_segments") or 0) for st in parts.values()),
        "errors": sorted({str(st["last_error"]) for st in parts.values() if st.get("last_error")}),
    }


def bare_listing(root: Path, tips: list[TopicIdPartition]) -> dict[str, float]:
    """The alternative: the same segments listed straight from the store, no daemon."""
    from rlmm.file import FileRemoteLogMetadataManager

    m = FileRemoteLogMetadataManager.open(root / "work" / "metadata")
    try:
        m.on_partition_leadership_changes(set(tips), set())
        c0, t0 = cpu_s(), time.perf_counter()
        n = sum(1 for tip in tips for _ in m.list_remote_log_segments(tip))
        return {"listing_s": time.perf_counter() - t0, "listing_cpu_s": cpu_s() - c0, "listed": n}
    finally:
        m.close()


def child(partitions: int, segments: int, threads: int) -> dict[str, Any]:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    with tempfile.TemporaryDirectory(prefix="rlm-bench-load-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        tips = synthesize(root, partitions, segments)
        out: dict[str, Any] = {
            "partitions": partitions,
            "segments": segments,
            "threads": threads,
            "synthesize_s": time.perf_counter() - t0,
        }
        out |= one_pass(root, threads)
        out |= bare_listing(root, tips)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(partitions: int, segments: int, threads: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--partitions",
        str(partitions),
        "--segments",
        str(segments),
        "--threads",
        str(threads),
    ]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--baseline", default="100,10000", help="PARTITIONS,SEGMENTS of the baseline scale")
    ap.add_argument("--threads", type=int, default=10, help="thread_pool_size (Kafka's default is 10)")
    ap.add_argument("--json", type=Path, help="also write the results here (docs/data/load-daemon.json)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.partitions, args.segments, args.threads)))
        return
    bp, bs = (int(x) for x in args.baseline.split(","))
    rows = [run_child(bp, bs, args.threads), run_child(args.partitions, args.segments, args.threads)]
    print(
        f"{'scale':>22} {'start s':>8} {'pass s':>7} {'pass CPU s':>10} {'ms/partition':>12} "
        f"{'us/segment':>10} {'bare listing s':>14} {'peak RSS MiB':>12} {'visited':>8} {'errors':>6}"
    )
    for r in rows:
        print(
            f"{r['partitions']:>6} p / {r['segments']:>7} seg {r['start_s']:>8.2f} {r['pass_s']:>7.2f} "
            f"{r['pass_cpu_s']:>10.2f} {1000 * r['pass_s'] / r['partitions']:>12.2f} "
            f"{1e6 * r['pass_s'] / r['segments']:>10.1f} {r['listing_s']:>14.2f} {r['peak_rss_mib']:>12.0f} "
            f"{r['visited']:>8} {r['failed_tasks'] + len(r['errors']):>6}"
        )
    base, big = rows
    print(
        f"scaling x{big['segments'] / base['segments']:.0f} data: "
        f"pass x{big['pass_s'] / base['pass_s']:.1f}, "
        f"CPU x{big['pass_cpu_s'] / base['pass_cpu_s']:.1f}; the pass costs "
        f"{big['pass_s'] / max(big['listing_s'], 1e-9):.1f}x the bare metadata listing"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "benchmark": "benchmarks/bench_load.py",
            "cpus": os.cpu_count(),
            "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        }
        args.json.write_text(
            json.dumps({**meta, "baseline": base, "result": big}, indent=1, sort_keys=True) + "\n"
        )


if __name__ == "__main__":
    main()
