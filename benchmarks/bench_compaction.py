"""Remote compaction vs Kafka's own log cleaner on the same segments, in the same run (not a test).

Starts one broker whose cleaner logs its statistics (``Log cleaner thread ... cleaned log``), writes
the keyed workload of ``tests/compaction/workload.py`` (``--keys`` keys, ``--rounds`` rounds of
updates of half of them, 300-byte incompressible values, tombstones, transactions, an idempotent
lz4 producer and a plain zstd one) to a compacted topic whose cleaner is held back, copies the
rolled segments aside, lets the broker's cleaner clean them, then compacts the copies with
:func:`rlm.compaction.compact` (``--rounds-engine`` times, after :func:`rlm.compaction.warm_kernels`,
a daemon's start-up cost reported apart; the first run reads cold files, the best of the others is
reported).

Throughput is records read per second: the cleaner's from its own log line (records at "Start size"
over the seconds of "log processed in"), ours from the records decoded over the wall time of
``compact`` (CPU time in the JSON). Memory per key is the offset map's bytes per key when full:
Kafka's ``SkimpyOffsetMap`` holds a 16-byte MD5 and an 8-byte offset per slot at load factor 0.9,
ours a 16-byte keyed digest and a 4-byte relative offset (:mod:`rlm.compaction.offset_map`), both
divided by the load factor; the map's allocation measured with ``tracemalloc`` is in the JSON.
Storage saved is the segment bytes in vs out. A last run gives the engine a map for a quarter of
the keys (several passes in one call). Results go to ``docs/data/bench-compaction.json``.

    .venv/bin/python benchmarks/bench_compaction.py --keys 20000 --rounds 10
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlm.compaction import BYTES_PER_SLOT, CompactionInput, CompactionSettings, compact, warm_kernels  # noqa: E402
from tests.compaction import workload as wl  # noqa: E402
from tests.services import kafka as kafka_service  # noqa: E402

KAFKA_SLOT = 16 + 8  # SkimpyOffsetMap: MD5 digest + offset
LOAD_FACTOR = 0.9
CLEANER_LOGGERS = """\
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
logger.cleanerj.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleanerj.level = INFO
logger.cleanerc.name = org.apache.kafka.storage.internals.log.Cleaner
logger.cleanerc.level = INFO
logger.cleanert.name = org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread
logger.cleanert.level = INFO
"""
_SIZE = r"([\d.,]+) MB"


def cleaner_stats(log_text: str, topic: str) -> dict[str, float]:
    """The stats block of the cleaner's first clean of ``topic``-0 (Kafka's own numbers)."""
    start = log_text.find(f"cleaned log {topic}-0")
    if start < 0:
        raise SystemExit(f"no 'cleaned log {topic}-0' line in the broker's log")
    block = log_text[start:start + 2000]
    processed = re.search(_SIZE + r" of log processed in ([\d.]+) seconds", block)
    start_size = re.search(r"Start size: " + _SIZE + r" \(([\d,]+) messages\)", block)
    end_size = re.search(r"End size: " + _SIZE + r" \(([\d,]+) messages\)", block)
    if not (processed and start_size and end_size):
        raise SystemExit(f"cannot parse the cleaner's stats:\n{block}")
    seconds = float(processed.group(2))
    records = int(start_size.group(2).replace(",", ""))
    return {"seconds": seconds, "records_in": records,
            "records_out": int(end_size.group(2).replace(",", "")),
            "mb_in": float(start_size.group(1).replace(",", "")),
            "mb_out": float(end_size.group(1).replace(",", "")),
            "records_per_s": records / seconds if seconds else float("inf")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rounds-engine", type=int, default=4)
    ap.add_argument("--output", type=Path, default=ROOT / "docs" / "data" / "bench-compaction.json")
    args = ap.parse_args()

    kafka_service.LOG4J2 = kafka_service.LOG4J2 + CLEANER_LOGGERS
    cluster = kafka_service.KafkaCluster(nodes=1, name="bench-compaction",
                                         extra={"log.cleaner.backoff.ms": "200"}).start()
    try:
        topic = "bench-compaction"
        wl.create_topic(cluster, topic)
        t0 = time.perf_counter()
        written = wl.write(cluster, topic, keys=args.keys, rounds=args.rounds)
        print(f"workload: {written.records} records in {time.perf_counter() - t0:.1f} s", flush=True)
        pdir = wl.partition_dir(cluster, topic)
        with tempfile.TemporaryDirectory() as tmp:
            copies, aborted, active = wl.copy_rolled(pdir, Path(tmp) / "input")
            wl.release_cleaner(cluster, topic)
            wl.wait_cleaned(cluster, topic, active, timeout=600)
            theirs = cleaner_stats(cluster.node(1).log.read_text(errors="replace"), topic)
            settings = CompactionSettings()
            w0 = time.perf_counter()
            warm_kernels()  # what a daemon does at start: load the compiled kernels
            warm_up_s = time.perf_counter() - w0
            runs = []
            for i in range(args.rounds_engine):
                cpu0 = time.process_time()
                w0 = time.perf_counter()
                result = compact(CompactionInput(copies, aborted=aborted), Path(tmp) / f"out{i}", settings)
                runs.append({"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - cpu0})
            best = min(r["wall_s"] for r in runs[1:] or runs)
            # a map for a quarter of the keys: several passes in one call (Kafka's cleaner would
            # clean a quarter and leave the rest for later cleans)
            quarter = int(BYTES_PER_SLOT * args.keys / 4 / LOAD_FACTOR)
            small = CompactionSettings(offset_map_memory_bytes=quarter)
            w0 = time.perf_counter()
            limited = compact(CompactionInput(copies, aborted=aborted), Path(tmp) / "small", small)
            small_run = {"map_bytes": small.offset_map_memory_bytes, "passes": limited.passes,
                         "wall_s": time.perf_counter() - w0, "records_out": limited.records_kept,
                         "records_per_s": limited.records_read / (time.perf_counter() - w0)}
            ours = {"records_in": result.records_read, "records_out": result.records_kept,
                    "bytes_in": result.bytes_in, "bytes_out": result.bytes_out, "passes": result.passes,
                    "warm_up_s": warm_up_s, "runs": runs, "best_wall_s": best,
                    "records_per_s": result.records_read / best}
    finally:
        cluster.stop()

    ours_per_key = BYTES_PER_SLOT / LOAD_FACTOR
    kafka_per_key = KAFKA_SLOT / LOAD_FACTOR
    report = {
        "workload": {"keys": args.keys, "rounds": args.rounds, "records": written.records,
                     "segments": len(copies)},
        "kafka_cleaner": theirs,
        "engine": ours,
        "throughput_ratio": ours["records_per_s"] / theirs["records_per_s"],
        # the first run after the warm-up reads the copied files cold
        "first_run_ratio": ours["records_in"] / ours["runs"][0]["wall_s"] / theirs["records_per_s"],
        "memory_per_key": {"engine_bytes": ours_per_key, "kafka_bytes": kafka_per_key,
                           "ratio": ours_per_key / kafka_per_key},
        "storage_saved": 1 - ours["bytes_out"] / ours["bytes_in"],
        "quarter_map": small_run,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    ratio = report["throughput_ratio"]
    print(f"Kafka's cleaner: {theirs['records_in']} records in {theirs['seconds']:.1f} s "
          f"= {theirs['records_per_s']:,.0f} records/s (its log rounds seconds to 0.1)")
    print(f"rlm.compaction:  {ours['records_in']} records in {best:.2f} s "
          f"= {ours['records_per_s']:,.0f} records/s ({ratio:.2f}x)")
    print(f"first run:       {ours['runs'][0]['wall_s']:.2f} s ({report['first_run_ratio']:.2f}x; "
          f"cold files), after a {warm_up_s:.1f} s warm-up per process (warm_kernels)")
    print(f"quarter map:     {small_run['passes']} passes, {small_run['wall_s']:.2f} s "
          f"= {small_run['records_per_s']:,.0f} records/s, {small_run['records_out']} kept")
    print(f"records kept:    {ours['records_out']} (the broker's cleaner: {theirs['records_out']})")
    print(f"memory per key:  {ours_per_key:.1f} B vs {kafka_per_key:.1f} B "
          f"({report['memory_per_key']['ratio']:.2f}x)")
    print(f"storage saved:   {report['storage_saved']:.1%} "
          f"({ours['bytes_in']:,} -> {ours['bytes_out']:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
