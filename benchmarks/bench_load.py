"""Daemon load benchmark: one full scheduler pass over 1,000 partitions and 100,000 remote segments.

Scenario (issue 13): a standalone log dir of ``--partitions`` partitions of one topic, each with
only its active segment locally (offsets ``[segments * 1000, +50)``) and ``--segments`` remote
segments in total (``COPY_SEGMENT_FINISHED``, 1,000 offsets each, leader epoch 0 from offset 0)
in the embedded file metadata store. Remote retention is off, so a pass copies and deletes
nothing: it is the steady-state cost of the scheduler visiting every partition (local log view,
LSO, copy planning) and of the expiry scan (list every remote segment, lineage check, coverage
gaps), plus the status board written after each partition run.

Per scale the data is synthesized once; then, in interleaved rounds (one warm-up, then
``--rounds``), each case in its own child process (clean peak RSS):

* ``daemon pass``: the real daemon, ``Daemon(once=True)``: ``start`` (preflight, loading the
  metadata store, discovering the log dirs; the warm-up round replays the store's log and leaves
  its snapshot, so counted rounds load the snapshot, as a restarted daemon does) and ``run_once()``
  (every partition's task on the pool, once): the pass's wall time is the figure, with the CPU of
  all threads and the child's peak RSS;
* ``bare listing``: the named alternative, the same metadata read straight from the store
  (``list_remote_log_segments`` for every partition, no daemon): the floor of the scan.

Both are checked every round: the digest of the (partition, segment id) pairs each saw — the
segments the daemon's metadata manager holds for the partitions it manages after the pass, and
the listing's — must equal that of the segments written; the pass must visit every partition, see
every segment in its status and fail no task. Otherwise the benchmark fails (exit 2).

The baseline scale (``--baseline``, default 100 partitions / 10,000 segments) runs in the same run,
so the report shows how the pass scales. Raw results: ``docs/data/bench-load.json`` (unless
``--no-save``); ``--json`` also writes the medians in the format docs/reliability.md reads. Not run
by the tests (``tests/daemon/test_load.py`` runs one reduced pass and checks its outcome)::

    .venv/bin/python benchmarks/bench_load.py [--partitions 1000 --segments 100000] \\
        [--json docs/data/load-daemon.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
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
    return synthesize_with_digest(root, partitions, segments)[0]


def segment_ids_digest(ids: Iterable[tuple[TopicIdPartition, RemoteLogSegmentId]]) -> str:
    """Digest of (partition, segment id) pairs, order-free: what a pass or a listing saw."""
    h = hashlib.blake2b(digest_size=16)
    for line in sorted(f"{tip.topic_id}/{tip.partition}/{sid.id}" for tip, sid in ids):
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def synthesize_with_digest(root: Path, partitions: int, segments: int) -> tuple[list[TopicIdPartition], str]:
    """:func:`synthesize`, and the digest of the segment ids it wrote (the reference)."""
    logs, meta = root / "logs", root / "work" / "metadata"
    meta.mkdir(parents=True)
    tid = KafkaUuid.random()
    per = [segments // partitions + (1 if p < segments % partitions else 0) for p in range(partitions)]
    tips, ends, ids = [], [], []
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
                ids.append((tip, md.remote_log_segment_id))
                done = RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, now, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, NODE_ID
                )
                for ev in (md, done):
                    payload = serialize(ev)
                    f.write(FRAME.pack(len(payload), google_crc32c.value(payload)))
                    f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    return tips, segment_ids_digest(ids)


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
        managed_tips = list(d.managed())
        managed = len(managed_tips)
        rlmm = d.ctx.rlmm
        seen = segment_ids_digest((tip, md.remote_log_segment_id) for tip in managed_tips
                                  for md in rlmm.list_remote_log_segments(tip))
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
        "digest": seen,
    }


def bare_listing(root: Path, tips: list[TopicIdPartition]) -> dict[str, Any]:
    """The alternative: the same segments listed straight from the store, no daemon."""
    from rlmm.file import FileRemoteLogMetadataManager

    m = FileRemoteLogMetadataManager.open(root / "work" / "metadata")
    try:
        m.on_partition_leadership_changes(set(tips), set())
        c0, t0 = cpu_s(), time.perf_counter()
        listed = [(tip, md.remote_log_segment_id) for tip in tips for md in m.list_remote_log_segments(tip)]
        took, cpu = time.perf_counter() - t0, cpu_s() - c0
        return {"listing_s": took, "listing_cpu_s": cpu, "listed": len(listed),
                "digest": segment_ids_digest(listed)}
    finally:
        m.close()


def child(mode: str, root: Path, threads: int) -> dict[str, Any]:
    """One case of one round, in its own process (a clean peak RSS): the daemon's pass or the bare
    listing over the data synthesized in ``root``."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    if mode == "pass":
        out = one_pass(root, threads)
    else:
        from rlmm.file import FileRemoteLogMetadataManager

        m = FileRemoteLogMetadataManager.open(root / "work" / "metadata")
        try:
            tips = sorted(m.known_partitions())
        finally:
            m._since_snapshot = 0  # read only: no snapshot on close
            m.close()
        out = bare_listing(root, tips)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(mode: str, root: Path, threads: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", mode, "--root", str(root), "--threads", str(threads)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def bench_scale(partitions: int, segments: int, threads: int, rounds: int
                ) -> tuple[list[dict[str, Any]], float]:
    """Interleaved rounds (one warm-up) of the daemon's pass and the bare listing on one synthesized
    scale; both must see exactly the segments written (digest of their ids), every partition
    visited, no task failed."""
    from benchlib import BenchFailure, Result, run_rounds

    with tempfile.TemporaryDirectory(prefix="rlm-bench-load-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        _, want = synthesize_with_digest(root, partitions, segments)
        took = time.perf_counter() - t0

        def daemon_pass() -> Result:
            r = run_child("pass", root, threads)
            if r["failed_tasks"] or r["errors"] or r["visited"] != partitions or \
                    r["remote_segments_seen"] != segments:
                raise BenchFailure(f"pass over {partitions} partitions: {r['failed_tasks']} failed, errors "
                                   f"{r['errors']}, {r['visited']} visited, {r['remote_segments_seen']} seen")
            return Result(r.pop("pass_s"), r.pop("digest"), 0, segments, r)

        def listing() -> Result:
            r = run_child("listing", root, threads)
            return Result(r.pop("listing_s"), r.pop("digest"), 0, r["listed"], r)

        rows = run_rounds({"daemon pass": daemon_pass, "bare listing": listing}, rounds,
                          label=f"{partitions} partitions / {segments} segments", expect=want)
    return rows, took


def legacy_summary(rows: list[dict[str, Any]], partitions: int, segments: int, threads: int,
                   synthesize_s: float) -> dict[str, Any]:
    """The counted rounds' medians in the format docs/reliability.md's generator reads
    (``--json docs/data/load-daemon.json``)."""
    counted = [r["cases"] for r in rows if not r["warmup"]]

    def med(case: str, key: str) -> float:
        return float(statistics.median(c[case][key] for c in counted))

    last = counted[-1]["daemon pass"]
    return {"partitions": partitions, "segments": segments, "threads": threads, "synthesize_s": synthesize_s,
            "start_s": med("daemon pass", "start_s"), "start_cpu_s": med("daemon pass", "start_cpu_s"),
            "pass_s": med("daemon pass", "seconds"), "pass_cpu_s": med("daemon pass", "pass_cpu_s"),
            "failed_tasks": max(c["daemon pass"]["failed_tasks"] for c in counted),
            "managed": last["managed"], "visited": last["visited"],
            "remote_segments_seen": last["remote_segments_seen"], "errors": last["errors"],
            "listing_s": med("bare listing", "seconds"),
            "listing_cpu_s": med("bare listing", "listing_cpu_s"),
            "listed": counted[-1]["bare listing"]["listed"],
            "peak_rss_mib": max(c["daemon pass"]["peak_rss_mib"] for c in counted)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--baseline", default="100,10000", help="PARTITIONS,SEGMENTS of the baseline scale")
    ap.add_argument("--threads", type=int, default=10, help="thread_pool_size (Kafka's default is 10)")
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--json", type=Path, help="also write the summary here (docs/data/load-daemon.json)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-load.json")
    ap.add_argument("--child", choices=("pass", "listing"), help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.root, args.threads)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchlib import Recorder, headline, target

    rec = Recorder("load", {k: v for k, v in vars(args).items() if k not in ("child", "root")})
    bp, bs = (int(x) for x in args.baseline.split(","))
    summaries = []
    for partitions, segments in ((bp, bs), (args.partitions, args.segments)):
        rows, took = bench_scale(partitions, segments, args.threads, args.rounds)
        key = f"{partitions} partitions / {segments} segments"
        rec.section(key, rows)
        summaries.append(legacy_summary(rows, partitions, segments, args.threads, took))
        print(f"{key}, median of per-round ratios:")
        rec.add(headline(rows, f"daemon pass vs bare metadata listing, {key}", "daemon pass", "bare listing",
                         None))
    base, big = summaries
    print(
        f"{'scale':>22} {'start s':>8} {'pass s':>7} {'pass CPU s':>10} {'ms/partition':>12} "
        f"{'us/segment':>10} {'bare listing s':>14} {'peak RSS MiB':>12} {'visited':>8} {'errors':>6}"
    )
    for r in summaries:
        print(
            f"{r['partitions']:>6} p / {r['segments']:>7} seg {r['start_s']:>8.2f} {r['pass_s']:>7.2f} "
            f"{r['pass_cpu_s']:>10.2f} {1000 * r['pass_s'] / r['partitions']:>12.2f} "
            f"{1e6 * r['pass_s'] / r['segments']:>10.1f} {r['listing_s']:>14.2f} {r['peak_rss_mib']:>12.0f} "
            f"{r['visited']:>8} {r['failed_tasks'] + len(r['errors']):>6}"
        )
    data_x = big["segments"] / base["segments"]
    pass_x = big["pass_s"] / base["pass_s"]
    rec.facts.update(baseline=base, result=big)
    rec.add_target(target(f"pass time for {data_x:g}x the data (median rounds)", pass_x, "x",
                          f"linear: about {data_x:g}x", None))
    rec.add_target(target(f"peak RSS, {big['partitions']} partitions / {big['segments']} segments",
                          big["peak_rss_mib"], "MiB", "none (context)", None))
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
    rec.save(not args.no_save)


if __name__ == "__main__":
    main()
