"""Metadata benchmark: memory per segment, (epoch, offset) lookup latency, restart time.

Scenario (issue 5): 2.6 million segment records — one segment per second for 30 days —
spread over ``--partitions`` user partitions, a leader epoch change every ``--epoch-every``
segments (the first segment of each new epoch straddles the change), every segment added
(COPY_SEGMENT_STARTED) and finished (COPY_SEGMENT_FINISHED): 5.2 million events.

Measures:
1. bytes per segment of the in-memory cache built event by event: process RSS growth, the
   numpy buffers alone, and (on a 10% sample, because tracing is slow) tracemalloc's live bytes;
2. ``remote_log_segment_metadata(tp, epoch, offset)`` latency, p50/p99/p99.9 over random hits
   (every one must find the segment holding the offset);
3. restart of the embedded store, in interleaved rounds (one warm-up, then ``--rounds``), each in a
   fresh process: **replaying** the whole metadata log (a directory without snapshot) vs **loading
   the snapshot** the store wrote of the same log (plus the time to write it), and the memory after
   each (RSS growth). Every restart's segments (ids, offsets, state, epochs, custom metadata, as
   listed) and its answers to ``--check-lookups`` random lookups are digested and must equal those
   of the cache built event by event, or the benchmark fails (exit 2).

Targets: <= 200 B/segment, restart from snapshot < 10 s (median of the rounds). Raw results:
``docs/data/bench-rlmm.json`` (unless ``--no-save``). Not run by the tests::

    .venv/bin/python benchmarks/bench_rlmm.py [--segments 2592000] [--partitions 100]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
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
from typing import Any

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BenchFailure, Recorder, Result, headline, run_rounds, target

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


def segments_digest(source: RemoteLogMetadataCache | FileRemoteLogMetadataManager,
                    tps: list[TopicIdPartition]) -> str:
    """Digest of every listed segment of every partition (id, offsets, state, epochs, custom
    metadata), in the store's listing order: the content a restart must reproduce."""
    h = hashlib.blake2b(digest_size=16)
    for tp in tps:
        h.update(f"{tp}\n".encode())
        for md in source.list_remote_log_segments(tp):
            h.update(f"{md.remote_log_segment_id.id}|{md.start_offset}|{md.end_offset}|{int(md.state)}|"
                     f"{md.segment_leader_epochs}|{md.broker_id}|{md.segment_size_in_bytes}\n".encode())
            h.update(md.custom_metadata or b"-")
    return h.hexdigest()


def lookup_queries(args: argparse.Namespace, tps: list[TopicIdPartition]
                   ) -> list[tuple[TopicIdPartition, int, int]]:
    """``--check-lookups`` random (partition, epoch, offset) queries, the same in every process."""
    rng = random.Random(5)
    out = []
    for _ in range(args.check_lookups):
        tp = rng.choice(tps)
        i = rng.randrange(args.per_partition)
        offset = i * SEG_OFFSETS + rng.randrange(SEG_OFFSETS)
        eps = epochs_of(i, args.epoch_every)
        out.append((tp, eps[-1][0] if len(eps) == 2 and offset >= eps[-1][1] else eps[0][0], offset))
    return out


def lookups_digest(source: RemoteLogMetadataCache | FileRemoteLogMetadataManager,
                   queries: list[tuple[TopicIdPartition, int, int]]) -> str:
    """Digest of the answers (segment id or none) to ``queries``."""
    h = hashlib.blake2b(digest_size=16)
    for tp, epoch, offset in queries:
        md = source.remote_log_segment_metadata(tp, epoch, offset)
        h.update(b"-" if md is None else md.remote_log_segment_id.id.raw)
    return h.hexdigest()


def prepare_restart_dirs(work: Path, tps: list[TopicIdPartition], args: argparse.Namespace,
                         rec: Recorder) -> tuple[Path, Path]:
    """``replay/``: the metadata log alone; ``snapshot/``: the same log and the snapshot the store
    writes of it (timed: ``snapshot_write_s``)."""
    replay, snap = work / "replay", work / "snapshot"
    rec.facts.update(write_log(replay, tps, args))
    snap.mkdir()
    shutil.copyfile(replay / LOG_FILE, snap / LOG_FILE)
    m = FileRemoteLogMetadataManager.open(snap, **{"snapshot.interval.records": 10**12})
    t0 = time.perf_counter()
    m.snapshot_now()
    rec.facts["snapshot_write_s"] = time.perf_counter() - t0
    m.close()
    rec.facts["snapshot_bytes"] = (snap / "metadata.snapshot").stat().st_size
    assert not (replay / "metadata.snapshot").exists()
    return replay, snap


def restart_case(directory: Path, args: argparse.Namespace, nbytes: int) -> Result:
    """One restart in a fresh process (its RSS growth is the loaded cache alone)."""
    cmd = [sys.executable, __file__, "--restart-probe", str(directory), "--segments", str(args.segments),
           "--partitions", str(args.partitions), "--epoch-every", str(args.epoch_every),
           "--check-lookups", str(args.check_lookups)]
    probe = subprocess.run(cmd, check=True, capture_output=True, text=True)
    r = json.loads(probe.stdout.strip().splitlines()[-1])
    return Result(r.pop("restart_s"), r.pop("digest"), nbytes, r["segments"], r)


def restart_probe(directory: Path, args: argparse.Namespace) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    tps = partitions(args.partitions)
    queries = lookup_queries(args, tps)
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    m = FileRemoteLogMetadataManager.open(directory, **{"snapshot.interval.records": 10**12})
    elapsed = time.perf_counter() - t0
    gc.collect()
    n = m.cache.segment_count()
    rss = (rss_bytes() - rss0) / n
    digest = f"{segments_digest(m, tps)}:{lookups_digest(m, queries)}"
    m._since_snapshot = 0  # nothing changed: no snapshot on close (the replay dir stays log-only)
    m.close()
    print(json.dumps({"restart_s": elapsed, "segments": n, "bytes_per_segment_rss": rss, "digest": digest}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=30 * 24 * 3600)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--epoch-every", type=int, default=5000, help="segments per leader epoch")
    ap.add_argument("--custom-bytes", type=int, default=0, help="custom metadata bytes per segment")
    ap.add_argument("--lookups", type=int, default=200_000, help="timed lookups (in the built cache)")
    ap.add_argument("--check-lookups", type=int, default=20_000,
                    help="lookups answered by every restart and compared with the built cache's")
    ap.add_argument("--rounds", type=int, default=3,
                    help="counted interleaved restart rounds (after one warm-up)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the log (default: a temp dir)")
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-rlmm.json")
    ap.add_argument("--restart-probe", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.per_partition = args.segments // args.partitions
    if args.restart_probe is not None:
        restart_probe(args.restart_probe, args)
        return
    rec = Recorder("rlmm", {k: v for k, v in vars(args).items()
                           if k not in ("restart_probe", "per_partition")})
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    tps = partitions(args.partitions)
    facts: dict[str, Any] = {"partitions": args.partitions, "custom_bytes": args.custom_bytes}
    facts["bytes_per_segment_traced_10pct"] = traced_bytes_per_segment(args, tps)
    cache, built = build_cache(args, tps)
    facts.update(built)
    facts.update(lookups(cache, tps, args))
    if facts["lookup_misses"]:
        raise BenchFailure(f"{facts['lookup_misses']} lookups of existing offsets found no segment")
    want = f"{segments_digest(cache, tps)}:{lookups_digest(cache, lookup_queries(args, tps))}"
    facts["reference_digest"] = want
    del cache
    rec.facts.update(facts)
    print(json.dumps(facts, indent=2), flush=True)
    print("targets:")
    rec.add_target(target("memory, cache built event by event (RSS growth)", facts["bytes_per_segment_rss"],
                          "B/segment", "<= 200", facts["bytes_per_segment_rss"] <= 200))
    rec.add_target(target("lookup (epoch, offset), p50", facts["lookup_p50_us"], "us", "none (context)",
                          None))
    rec.add_target(target("lookup (epoch, offset), p99", facts["lookup_p99_us"], "us", "none (context)",
                          None))
    if not args.skip_restart:
        work = Path(tempfile.mkdtemp(prefix="bench-rlmm-", dir=args.workdir))
        try:
            replay, snap = prepare_restart_dirs(work, tps, args, rec)
            log_bytes = (replay / LOG_FILE).stat().st_size
            snap_bytes = rec.facts["snapshot_bytes"]
            rows = run_rounds({"load the snapshot": lambda: restart_case(snap, args, snap_bytes),
                               "replay the log": lambda: restart_case(replay, args, log_bytes)},
                              args.rounds, label="restart", expect=want)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rec.section("restart", rows)
        counted = [r for r in rows if not r["warmup"]]
        snap_s = statistics.median(r["cases"]["load the snapshot"]["seconds"] for r in counted)
        snap_rss = statistics.median(r["cases"]["load the snapshot"]["bytes_per_segment_rss"]
                                     for r in counted)
        rec.add_target(target("restart from the snapshot (median)", snap_s, "s", "< 10", snap_s < 10))
        rec.add_target(target("memory after a restart from the snapshot (RSS growth)", snap_rss, "B/segment",
                              "<= 200", snap_rss <= 200))
        print("restart, median of per-round ratios:")
        rec.add(headline(rows, "restart: load the snapshot vs replay the whole log", "load the snapshot",
                         "replay the log", None))
    rec.save(not args.no_save)


if __name__ == "__main__":
    main()
