"""Metadata benchmark: memory per segment, (epoch, offset) lookup latency, restart time.

Scenario (issue 5): 2.6 million segment records — one segment per second for 30 days —
spread over ``--partitions`` user partitions, a leader epoch change every ``--epoch-every``
segments (the first segment of each new epoch straddles the change), every segment added
(COPY_SEGMENT_STARTED) and finished (COPY_SEGMENT_FINISHED): 5.2 million events.

Measures:
1. bytes per segment of the in-memory cache built event by event: process RSS growth, the
   numpy buffers alone, and (on a 10% sample, because tracing is slow) tracemalloc's live bytes;
2. ``remote_log_segment_metadata(tp, epoch, offset)`` latency, p50/p99/p99.9 over random hits;
3. restart of the embedded store: replaying the whole metadata log vs loading the snapshot
   (plus the time to write that snapshot), and memory after the snapshot load (RSS delta).

Targets: <= 200 B/segment, restart from snapshot < 10 s. Not run by the tests::

    .venv/bin/python benchmarks/bench_rlmm.py [--segments 2592000] [--partitions 100]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import structlog

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.cache import RemoteLogMetadataCache
from rlmm.file import FileRemoteLogMetadataManager
from rlmm.file_log import FRAME, LOG_FILE, MAGIC
from rlmm.serde import serialize

SEG_OFFSETS = 1000  # offsets per segment


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def partitions(n: int) -> list[TopicIdPartition]:
    rng = random.Random(7)
    return [TopicIdPartition(KafkaUuid(rng.randbytes(16)), f"bench-topic-{p % 10}", p // 10)
            for p in range(n)]


def epochs_of(i: int, epoch_every: int) -> tuple[tuple[int, int], ...]:
    start = i * SEG_OFFSETS
    e = i // epoch_every
    if i % epoch_every == 0 and e > 0:
        return (e - 1, start), (e, start + SEG_OFFSETS // 2)
    return ((e, start),)


def events(tps: list[TopicIdPartition], per_partition: int, epoch_every: int, custom: int
           ) -> Iterator[RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate]:
    rng = random.Random(11)
    cm = bytes(custom) if custom else None
    for i in range(per_partition):
        for tp in tps:
            sid = RemoteLogSegmentId(tp, KafkaUuid(rng.randbytes(16)))
            start = i * SEG_OFFSETS
            ts = 1_700_000_000_000 + i * 1000
            yield RemoteLogSegmentMetadata(sid, start, start + SEG_OFFSETS - 1, ts, 1, ts, 1 << 30,
                                           epochs_of(i, epoch_every))
            yield RemoteLogSegmentMetadataUpdate(sid, ts + 500, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 1, cm)


def traced_bytes_per_segment(args: argparse.Namespace, tps: list[TopicIdPartition]) -> float:
    """tracemalloc's live bytes per segment for a cache of a tenth of the size (numpy included)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cache = RemoteLogMetadataCache()
    for ev in events(tps, max(1, args.per_partition // 10), args.epoch_every, args.custom_bytes):
        cache.apply(ev)
    gc.collect()
    live = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return live / cache.segment_count()


def build_cache(args: argparse.Namespace, tps: list[TopicIdPartition]
                ) -> tuple[RemoteLogMetadataCache, dict[str, float]]:
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    cache = RemoteLogMetadataCache()
    for ev in events(tps, args.per_partition, args.epoch_every, args.custom_bytes):
        cache.apply(ev)
    elapsed = time.perf_counter() - t0
    gc.collect()
    n = cache.segment_count()
    return cache, {"segments": n, "build_s": elapsed, "events_per_s": 2 * n / elapsed,
                   "bytes_per_segment_rss": (rss_bytes() - rss0) / n,
                   "bytes_per_segment_numpy": cache.nbytes() / n}


def lookups(cache: RemoteLogMetadataCache, tps: list[TopicIdPartition], args: argparse.Namespace
            ) -> dict[str, float]:
    rng = random.Random(3)
    samples: list[int] = []
    misses = 0
    for _ in range(args.lookups):
        tp = rng.choice(tps)
        i = rng.randrange(args.per_partition)
        offset = i * SEG_OFFSETS + rng.randrange(SEG_OFFSETS)
        eps = epochs_of(i, args.epoch_every)
        epoch = eps[-1][0] if len(eps) == 2 and offset >= eps[-1][1] else eps[0][0]
        t0 = time.perf_counter_ns()
        md = cache.remote_log_segment_metadata(tp, epoch, offset)
        samples.append(time.perf_counter_ns() - t0)
        if md is None or not md.start_offset <= offset <= md.end_offset:
            misses += 1
    samples.sort()
    q = statistics.quantiles(samples, n=1000)
    return {"lookup_p50_us": q[499] / 1000, "lookup_p99_us": q[989] / 1000, "lookup_p999_us": q[998] / 1000,
            "lookup_misses": misses}


def write_log(directory: Path, tps: list[TopicIdPartition], args: argparse.Namespace) -> dict[str, float]:
    """Writes the metadata log directly (one fsync at the end, not one per record)."""
    directory.mkdir(parents=True)
    t0 = time.perf_counter()
    records = 0
    with open(directory / LOG_FILE, "wb", buffering=8 << 20) as f:
        f.write(MAGIC)
        for ev in events(tps, args.per_partition, args.epoch_every, args.custom_bytes):
            payload = serialize(ev)
            f.write(FRAME.pack(len(payload), google_crc32c.value(payload)))
            f.write(payload)
            records += 1
        f.flush()
        os.fsync(f.fileno())
    return {"log_records": records, "log_bytes": (directory / LOG_FILE).stat().st_size,
            "log_write_s": time.perf_counter() - t0}


def restarts(directory: Path) -> dict[str, float]:
    res: dict[str, float] = {}
    gc.collect()
    t0 = time.perf_counter()
    m = FileRemoteLogMetadataManager.open(directory, **{"snapshot.interval.records": 10**12})
    res["restart_replay_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    m.snapshot_now()
    res["snapshot_write_s"] = time.perf_counter() - t0
    res["snapshot_bytes"] = (directory / "metadata.snapshot").stat().st_size
    m.close()
    del m
    gc.collect()
    # a fresh process, so that its RSS growth is the loaded cache alone
    probe = subprocess.run([sys.executable, __file__, "--restart-probe", str(directory)], check=True,
                           capture_output=True, text=True)
    res.update(json.loads(probe.stdout.strip().splitlines()[-1]))
    return res


def restart_probe(directory: Path) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    m = FileRemoteLogMetadataManager.open(directory)
    elapsed = time.perf_counter() - t0
    gc.collect()
    n = m.cache.segment_count()
    print(json.dumps({"restart_snapshot_s": elapsed, "segments_after_restart": n,
                      "bytes_per_segment_after_snapshot_load_rss": (rss_bytes() - rss0) / n}))
    m._since_snapshot = 0  # nothing changed: keep the close cheap
    m.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=30 * 24 * 3600)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--epoch-every", type=int, default=5000, help="segments per leader epoch")
    ap.add_argument("--custom-bytes", type=int, default=0, help="custom metadata bytes per segment")
    ap.add_argument("--lookups", type=int, default=200_000)
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the log (default: a temp dir)")
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--restart-probe", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.restart_probe is not None:
        restart_probe(args.restart_probe)
        return
    args.per_partition = args.segments // args.partitions
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    tps = partitions(args.partitions)
    results: dict[str, float] = {"partitions": args.partitions, "custom_bytes": args.custom_bytes}
    results["bytes_per_segment_traced_10pct"] = traced_bytes_per_segment(args, tps)
    cache, built = build_cache(args, tps)
    results.update(built)
    results.update(lookups(cache, tps, args))
    del cache
    if not args.skip_restart:
        work = Path(tempfile.mkdtemp(prefix="bench-rlmm-", dir=args.workdir))
        try:
            results.update(write_log(work / "store", tps, args))
            results.update(restarts(work / "store"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
