"""Remote compaction vs Kafka's own log cleaner on the same segments, in the same run (not a test).

One broker whose cleaner logs its statistics (``Log cleaner thread ... cleaned log``). Before the
rounds, the keyed workload of ``tests/compaction/workload.py`` (``--keys`` keys, ``--updates``
rounds of updates of half of them, 300-byte incompressible values, tombstones, committed and
aborted transactions, an idempotent lz4 producer and a plain zstd one) is written to one compacted
topic per round (one warm-up, then ``--rounds``), each with its cleaner held back, and each topic's
rolled segments are copied aside. Then, interleaved, round by round:

* ``Kafka log cleaner``: the topic's cleaner is released and cleans the segments; its time is
  the "log processed in" seconds of its own stats line (Kafka prints them to 0.1 s), its records
  the "Start size" messages; the content it kept (offset, key, value of every data record below
  the active segment, read from the broker's cleaned files) is the round's reference digest. Its
  record counts include control records (transaction markers) and skip the records of batches it
  drops whole, so they differ a little from the engine's data-record counts: the digests compare;
* ``rlm.compaction``: :func:`rlm.compaction.compact` of the copies of the same segments (the
  aborted transactions of the ``.txnindex`` files and the producers' last batches given, as the
  daemon gives them), wall time; its output's content must equal the cleaner's (else exit 2);
* ``rlm.compaction, 1/4-size map``: the same with an offset map for a quarter of the keys (several
  passes in one call, where Kafka's cleaner would clean a quarter and leave the rest for later);
  same content required.

Before the rounds the engine loads its compiled kernels (:func:`rlm.compaction.warm_kernels`, what
a daemon does once at start): that cost is reported apart, as context. Goals (issue 44): records/s
at least the cleaner's (median of per-round time ratios, the same segments in both), memory per key
at most the cleaner's: a full map holds a key in ``BYTES_PER_SLOT`` bytes (16-byte keyed digest,
4-byte relative offset, :mod:`rlm.compaction.offset_map`) at the load factor, Kafka's
``SkimpyOffsetMap`` in 24 bytes (16-byte MD5, 8-byte offset) at its default load factor 0.9.
Context: storage saved (segment bytes out vs in: what compaction saves over tiering without it).
Every round goes to ``docs/data/bench-compaction[-<keys>keys].json``.

    .venv/bin/python benchmarks/bench_compaction.py      # 20000 keys x 10 updates, 5 rounds: ~1 min
    .venv/bin/python benchmarks/bench_compaction.py --keys 5000 --rounds 2

The engine allocates its offset map (``offset_map_memory_bytes``, 128 MiB by default) per call,
where the broker allocates its dedupe buffer once: that cost is in every ``rlm.compaction`` time.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import (  # noqa: E402
    BenchFailure,
    Recorder,
    Result,
    headline,
    quiet_logs,
    run_rounds,
    sized_name,
    table_digest,
    target,
)

from rlm.compaction import (  # noqa: E402
    BYTES_PER_SLOT,
    CompactionInput,
    CompactionSettings,
    compact,
    last_batches_of_producers,
    warm_kernels,
)
from rlm.log import iter_batches, read_arrow  # noqa: E402
from rlm.log.txn_index import AbortedTxn  # noqa: E402
from tests.compaction import workload as wl  # noqa: E402
from tests.services import kafka as kafka_service  # noqa: E402

DEFAULT_KEYS = 20000
KAFKA_SLOT = 16 + 8  # SkimpyOffsetMap: MD5 digest + 8-byte offset per entry
KAFKA_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor's default
CLEANER = "Kafka log cleaner"
OURS = "rlm.compaction"
QUARTER = "rlm.compaction, 1/4-size map"
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


@dataclass
class Prepared:
    """One round's topic: the uncleaned copies of its rolled segments and what the engine needs."""

    topic: str
    copies: list[Path]
    aborted: list[AbortedTxn]
    active: int  # the active segment's base offset: everything below it is cleaned
    bytes_in: int
    records_written: int


def cleaner_stats(log_text: str, topic: str) -> dict[str, Any]:
    """The stats block of the cleaner's clean of ``topic``-0 (Kafka's own numbers)."""
    m = re.search(rf"cleaned log {re.escape(topic)}-0 \(dirty section = \[(\d+), (\d+)\]\)", log_text)
    if m is None:
        raise BenchFailure(f"no 'cleaned log {topic}-0' line in the broker's log")
    block = log_text[m.start():m.start() + 2000]
    processed = re.search(_SIZE + r" of log processed in ([\d.]+) seconds", block)
    start_size = re.search(r"Start size: " + _SIZE + r" \(([\d,]+) messages\)", block)
    end_size = re.search(r"End size: " + _SIZE + r" \(([\d,]+) messages\)", block)
    if not (processed and start_size and end_size):
        raise BenchFailure(f"cannot parse the cleaner's stats:\n{block}")
    return {"seconds": float(processed.group(2)), "dirty_end": int(m.group(2)),
            "records_in": int(start_size.group(2).replace(",", "")),
            "records_out": int(end_size.group(2).replace(",", "")),
            "mb_in": float(start_size.group(1).replace(",", "")),
            "mb_out": float(end_size.group(1).replace(",", ""))}


def digest_of(logs: list[Path], below: int) -> str:
    """Content digest of the records (offset, key, value) below ``below`` in ``logs``, in order."""
    import pyarrow as pa

    tables = [read_arrow(log, topic="t", partition=0, end_offset=below) for log in logs]
    return table_digest({0: pa.concat_tables(tables).select(["offset", "key", "value"])})


def prepare(cluster: kafka_service.KafkaCluster, topic: str, args: argparse.Namespace,
            dest: Path) -> Prepared:
    wl.create_topic(cluster, topic)
    t0 = time.perf_counter()
    written = wl.write(cluster, topic, keys=args.keys, rounds=args.updates)
    copies, aborted, active = wl.copy_rolled(wl.partition_dir(cluster, topic), dest)
    if wl.cleaner_checkpoint(cluster, topic) >= 0:
        raise BenchFailure(f"the broker's cleaner ran on {topic} before its segments were copied")
    print(f"{topic}: {written.records} records, {len(copies)} rolled segments in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return Prepared(topic, copies, aborted, active, sum(p.stat().st_size for p in copies), written.records)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=DEFAULT_KEYS, help="distinct keys of the workload")
    ap.add_argument("--updates", type=int, default=10, help="workload rounds, each updating half of the keys")
    ap.add_argument("--rounds", type=int, default=5, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-compaction*.json")
    args = ap.parse_args()
    quiet_logs()
    rec = Recorder(sized_name("compaction", args.keys, DEFAULT_KEYS, "keys"), args)

    kafka_service.LOG4J2 = kafka_service.LOG4J2 + CLEANER_LOGGERS
    cluster = kafka_service.KafkaCluster(nodes=1, name="bench-compaction",
                                         extra={"log.cleaner.backoff.ms": "200"}).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            topics = [prepare(cluster, f"bench-compaction-{i}", args, work / f"in{i}")
                      for i in range(1 + args.rounds)]
            settings = CompactionSettings()
            quarter = CompactionSettings(
                offset_map_memory_bytes=int(BYTES_PER_SLOT * args.keys / 4 / settings.load_factor))
            w0 = time.perf_counter()
            warm_kernels()  # what a daemon does once at start: load the compiled kernels
            warm_up_s = time.perf_counter() - w0
            rows = run_rounds(cases(cluster, iter(topics), work, settings, quarter), args.rounds,
                              label="compaction", reference=CLEANER)
    finally:
        cluster.stop()
    rec.section("compaction", rows)

    counted = [r for r in rows if not r["warmup"]]
    ours = counted[-1]["cases"][OURS]
    rec.facts.update({
        "records_written_per_topic": [p.records_written for p in topics],
        "segments_per_topic": [len(p.copies) for p in topics],
        "engine_warm_up_s": round(warm_up_s, 3),
        "map_bytes": {"default": settings.offset_map_memory_bytes,
                      "quarter": quarter.offset_map_memory_bytes},
        "quarter_map_passes": [r["cases"][QUARTER]["passes"] for r in counted],
        "cleaner_seconds_resolution": 0.1,
    })
    rec.add(headline(rows, "records/s compacting the same segments (cleaner: its stats line)", OURS, CLEANER,
                     1.0))
    rec.add(headline(rows, "records/s with a map for 1/4 of the keys (several passes in one call)", QUARTER,
                     CLEANER, None))
    ours_per_key = BYTES_PER_SLOT / settings.load_factor
    kafka_per_key = KAFKA_SLOT / KAFKA_LOAD_FACTOR
    rec.add_target(target("offset map memory per key (full map)", ours_per_key, "B",
                          f"<= {kafka_per_key:.1f} B (Kafka's SkimpyOffsetMap: {KAFKA_SLOT} B per entry "
                          f"/ load factor {KAFKA_LOAD_FACTOR:g})", ours_per_key <= kafka_per_key))
    saved = 100 * (1 - ours["bytes_out"] / ours["bytes"])
    rec.add_target(target("storage saved vs tiering without compaction", saved, "%", "none (context)", None))
    rec.add_target(target("engine warm-up per process (warm_kernels, before the rounds)", warm_up_s, "s",
                          "none (context)", None))
    rec.save(not args.no_save)
    return 0


def cases(cluster: kafka_service.KafkaCluster, topics: Iterator[Prepared], work: Path,
          settings: CompactionSettings, quarter: CompactionSettings) -> dict[str, Callable[[], Result]]:
    """The three cases of a round; the cleaner's (called first) takes the round's topic."""
    current: list[Prepared] = []
    producers: list[Any] = []

    def cleaner() -> Result:
        p = next(topics)
        current[:] = [p]
        pdir = wl.partition_dir(cluster, p.topic)
        wl.release_cleaner(cluster, p.topic)
        wl.wait_cleaned(cluster, p.topic, p.active, timeout=600)
        stats = cleaner_stats(cluster.node(1).log.read_text(errors="replace"), p.topic)
        if stats["dirty_end"] < p.active:
            raise BenchFailure(f"the cleaner's first clean of {p.topic} ended at {stats['dirty_end']}, "
                               f"not at the active segment {p.active}: its stats cover part of the work")
        logs = [log for log in wl.segment_files(pdir) if int(log.name.removesuffix(".log")) < p.active]
        # the broker's producer state when it cleans covers its active segment too: the daemon's input
        producers[:] = [last_batches_of_producers(
            h for log in wl.segment_files(pdir) for h in iter_batches(log.read_bytes()))]
        return Result(stats["seconds"], digest_of(logs, p.active), bytes=p.bytes_in,
                      records=stats["records_in"],
                      extra={"records_kept": stats["records_out"], "mb_in": stats["mb_in"],
                             "mb_out": stats["mb_out"]})

    def engine(name: str, s: CompactionSettings) -> Callable[[], Result]:
        def run() -> Result:
            p = current[0]
            out = work / f"{p.topic}-{name}"
            cpu0 = time.process_time()
            w0 = time.perf_counter()
            res = compact(CompactionInput(p.copies, aborted=p.aborted, producers=producers[0]), out, s)
            wall = time.perf_counter() - w0
            cpu = time.process_time() - cpu0
            if res.files is None or res.end_offset != p.active:
                raise BenchFailure(f"{name}: compacted up to {res.end_offset}, not {p.active}")
            return Result(wall, digest_of([res.files.log], p.active), bytes=res.bytes_in,
                          records=res.records_read,
                          extra={"cpu_s": round(cpu, 3), "records_kept": res.records_kept,
                                 "bytes_out": res.bytes_out, "passes": res.passes,
                                 "map_memory_bytes": res.map_memory_bytes})
        return run

    return {CLEANER: cleaner, OURS: engine("full", settings), QUARTER: engine("quarter", quarter)}


if __name__ == "__main__":
    raise SystemExit(main())
