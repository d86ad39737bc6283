"""Remote read benchmark: ``fetcher.RemoteFetcher`` against a plain download of the same objects (not a test).

Produces ``--size-mb`` of 1 KiB records (distinct keys) to a real broker (one KRaft node,
``--segment-mb`` segments), reads them back with a confluent-kafka consumer (the reference
content: a digest of every record), tiers them with ``rlm run --once`` to ``--storage``: ``s3``
(the default; the ``s3`` plugin on SeaweedFS ``weed mini``, started as the tests do) or
``local`` (the ``local`` plugin), with the embedded file metadata store. Then, in the same run:

* ``fetch 1MB random``: ``fetch(max_bytes=1 MiB)`` at random offsets, p50/p99, *cold* (a new
  fetcher with empty caches for every sample) and *warm* (one fetcher, indexes cached); every
  answer decoded and compared with the reference records at that offset;
* interleaved rounds (one warm-up, then ``--rounds``) of ``scan()`` of the whole range to Arrow
  with read-ahead (the default) and without (``read_ahead_chunks: 0``), and of the floor: boto3's
  ``download_file`` of the same ``.log`` objects (s3) or ``shutil.copyfile`` of the plugin's files
  (local). After each case (untimed) its records — the scan's table, the floor's files decoded
  with ``rlm.log.read_arrow`` — are digested and must equal the broker's, or the benchmark fails.

Each scan case (with read-ahead, without, each variant) runs in a worker process of its own
(``--worker``), started once and asked for one scan per round (so that no case runs on the heap
another case left), and a ``--variant NAME:CODE_ROOT`` (another checkout, e.g. a ``git worktree``
of the commit before a change) is measured in the same run, under the same load,
against the same objects. A scan's fetcher is made (and its plugin's client created) before the
clock starts, as the floor's boto3 client is: both time the reading of the history, indexes
included for the scan. ``--pin`` runs the serving side (SeaweedFS, the broker: every thread of
their process trees) on CPU 0 and the readers (this process, the workers) on CPU 1, as the
Kafka endpoint benchmark's pinned variant does, so a round's ratio does not follow which side the
scheduler favoured; pinned results go to ``bench-fetch-<storage>-pinned.json``. ``--py-spy DIR``
records a py-spy profile (raw collapsed stacks) of each scan worker over all rounds, ``--perf DIR`` a
perf one (native frames and the kernel: copies, page faults). ``--repeat
N`` makes each case of a round N scans (downloads) back to back, each with a new fetcher, timed
together: rounds long enough that a burst of the machine's other load does not decide one.

Printed: every round, and the median of the per-round ratios (scan rate / floor rate). Raw
results go to ``docs/data/bench-fetch-<storage>[-pinned].json`` unless ``--no-save``.

    .venv/bin/python benchmarks/bench_fetch.py --size-mb 2048 --segment-mb 128
    .venv/bin/python benchmarks/bench_fetch.py --size-mb 256 --storage local
    .venv/bin/python benchmarks/bench_fetch.py --pin --rounds 5 --variant old:/tmp/rlm-old
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# a worker imports the code it measures from RLM_BENCH_CODE (a variant's checkout), not this one
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, os.environ.get("RLM_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

from benchlib import (
    BenchFailure,
    Recorder,
    Result,
    headline,
    quiet_logs,
    run_rounds,
    sized_name,
    table_digest,
)

MB = 1 << 20
TOPIC = "bench-fetch"
DEFAULT_SIZE_MB = 256  # the documented default (make bench: 64, recorded apart as fetch-<storage>-64mb)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def produce(bs: str, total: int, record: int) -> int:
    from confluent_kafka import Producer

    pool = [random.randbytes(record) for _ in range(256)]
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1",
                  "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})
    n = 0
    for n in range(total // record):
        while True:
            try:
                p.produce(TOPIC, key=f"k{n}".encode(), value=pool[n % len(pool)], partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if n % 5000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return n + 1


def broker_records(bs: str, end: int) -> Any:
    """Every record of [0, end) as the broker serves it (confluent-kafka): the reference table."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 * MB, "max.partition.fetch.bytes": 16 * MB})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    deadline = time.monotonic() + 600
    while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is not None:
                raise BenchFailure(f"broker consumer error: {m.error()}")
            if m.offset() < end:
                offsets.append(m.offset())
                keys.append(m.key())
                values.append(m.value())
    c.close()
    if offsets != list(range(end)):
        raise BenchFailure(f"the broker's records are not offsets [0, {end}) ({len(offsets)} read)")
    return pa.table({"offset": pa.array(offsets, pa.int64()), "key": pa.array(keys, pa.binary()),
                     "value": pa.array(values, pa.binary())})


def _faults() -> int:
    """Page faults of this process so far (minor: fresh memory touched; on a VM each costs the
    host's allocation too, milliseconds per MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _cpu() -> float:
    """CPU seconds of this process, all threads (user + system): what a case costs the machine."""
    t = os.times()
    return t.user + t.system


def worker(conf_path: str) -> int:
    """One scan per line of stdin (``{"name": ..., "read": {...}}``), answered with a JSON line:
    seconds, digest, rows, GET counts. The fetcher and its plugin's client are made untimed."""
    import pyarrow as pa

    from fetcher import RemoteFetcher
    from rlm.config import load_config

    quiet_logs()
    conf = json.loads(Path(conf_path).read_text())
    tmp, base = Path(conf["tmp"]), conf["base"]
    marks = os.environ.get("RLM_BENCH_MARKS")
    for line in sys.stdin:
        req = json.loads(line)
        work = tmp / f"scan-{req['name']}"
        total, cpu, main_cpu, faults, digests = 0.0, 0.0, 0.0, 0, set()
        for _ in range(req["repeat"]):  # each a new fetcher: cold caches, as the first
            shutil.rmtree(work, ignore_errors=True)
            cfg = load_config(None, work_dir=str(work), read=req["read"], **base)
            with RemoteFetcher.from_config(cfg) as f:
                # the floor's client is made once, untimed: so are this one's (boto3's, and the
                # signer of the s3 plugin's direct GET path, else made inside the first GET)
                getattr(f.rsm, "client", None)
                getattr(f.rsm, "_direct_getter", lambda: None)()
                c0, m0, p0, t0 = _cpu(), time.thread_time(), _faults(), time.perf_counter()
                mark = time.monotonic()
                batches = list(f.scan(TOPIC, 0, include_headers=False))
                total += time.perf_counter() - t0
                if marks:  # the timed window, for --perf (whose clock is CLOCK_MONOTONIC)
                    with open(marks, "a") as out:
                        out.write(f"{mark:.6f},{time.monotonic():.6f}\n")
                faults += _faults() - p0
                cpu += _cpu() - c0
                main_cpu += time.thread_time() - m0  # the decoding thread's share (the rest: GETs)
                st = f.stats.snapshot()
            table = pa.Table.from_batches(batches)
            del batches
            digests.add(table_digest({0: table}))
        print(json.dumps({"seconds": total, "rows": table.num_rows, "cpu_s": cpu, "main_cpu_s": main_cpu,
                          "faults": faults,
                          "digest": digests.pop() if len(digests) == 1 else f"differs: {sorted(digests)}",
                          "get_requests": st["get_requests"], "index_fetches": st["index_fetches"]}),
              flush=True)
    return 0


class ScanWorker:
    """A ``--worker`` process importing the fetcher from ``code`` (None: this checkout)."""

    def __init__(self, name: str, conf_path: Path, code: str | None, cwd: Path,
                 marks_dir: Path | None = None) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if marks_dir is not None:  # --perf: each timed scan's window, to profile only those
            env["RLM_BENCH_MARKS"] = str(marks_dir / f"marks-{name}.txt")
        if code:
            env["RLM_BENCH_CODE"] = code
        self.name = name
        # started from the temporary directory: ``sys.path[0]`` is then this script's directory,
        # and the code under test comes only from RLM_BENCH_CODE
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(conf_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
        where = subprocess.run(
            [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import fetcher; "
             "print(fetcher.__file__)", code or str(Path(__file__).resolve().parent.parent)],
            cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
        print(f"scan worker {name}: code from {Path(where).parent.parent}", flush=True)

    def scan(self, seg_bytes: int, repeat: int, **read: Any) -> Result:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"name": self.name, "read": read, "repeat": repeat}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise BenchFailure(f"scan worker {self.name} ended (exit {self.proc.wait()})")
        r = json.loads(line)
        return Result(r["seconds"], r["digest"], seg_bytes * repeat, r["rows"],
                      {"cpu_s": r["cpu_s"], "main_cpu_s": r["main_cpu_s"], "faults": r["faults"],
                       "get_requests": r["get_requests"], "index_fetches": r["index_fetches"]})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=DEFAULT_SIZE_MB)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--storage", choices=("s3", "local"), default="s3")
    ap.add_argument("--samples", type=int, default=200, help="warm random fetches")
    ap.add_argument("--cold-samples", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-fetch-<storage>.json")
    ap.add_argument("--repeat", type=int, default=1,
                    help="scans (downloads) per case and round, timed together: longer, steadier rounds")
    ap.add_argument("--pin", action="store_true",
                    help="serving side (SeaweedFS, broker) on CPU 0, readers (this process, scan "
                    "workers) on CPU 1")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:CODE_ROOT",
                    help="also scan with the code of another checkout (e.g. a git worktree of an "
                    "older commit)")
    ap.add_argument("--read-variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                    help="also scan with other `read` settings (integers), e.g. "
                    "wide:parallel_gets=8,chunk_bytes=16777216, in a worker of its own")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record a py-spy profile of each scan worker into DIR")
    ap.add_argument("--py-spy-cpu", action="store_true",
                    help="with --py-spy: sample threads only while they run on a CPU (where the CPU "
                    "goes), not also while they wait (where the wall time goes, the default)")
    ap.add_argument("--perf", type=Path, default=None, metavar="DIR",
                    help="record a perf profile (call graphs, native code and the kernel: page "
                    "faults, copies) of each scan worker into DIR/perf-<case>.data")
    args = ap.parse_args()
    rec = Recorder(sized_name(f"fetch-{args.storage}", args.size_mb, DEFAULT_SIZE_MB, "mb")
                   + ("-pinned" if args.pin else ""), args)
    quiet_logs()

    import pyarrow as pa

    from fetcher import RemoteFetcher
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from rlm.log import read_arrow
    from rsm_plugins.layout import SegmentFileType
    from tests.daemon.helpers import create_topic, s3_storage
    from tests.services.kafka import KafkaCluster
    from tests.services.s3 import SeaweedFS

    tmp = Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    weed = SeaweedFS(name="bench-fetch").start() if args.storage == "s3" else None
    kafka = KafkaCluster(nodes=1, name="bench-fetch", heap="1g").start()
    try:
        bs = kafka.bootstrap
        create_topic(bs, TOPIC, **{"segment.bytes": str(args.segment_mb * MB)})
        t0 = time.perf_counter()
        records = produce(bs, args.size_mb * MB, args.record_bytes)
        took = time.perf_counter() - t0
        print(f"produced {records} records ({args.size_mb} MB) in {took:.1f}s", flush=True)
        if weed is not None:
            storage = s3_storage(weed, weed.create_bucket("bench-fetch"))
            storage["config"]["read_timeout"] = 60.0
        else:
            storage = {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}}
        base: dict[str, Any] = {"bootstrap_servers": bs, "storage": storage,
                                "metadata": {"manager": "file", "config": {"dir": str(tmp / "metadata")}},
                                "topics": [{"pattern": TOPIC, "remote.storage.enable": True,
                                            "retention.ms": -1}],
                                "http": {"enabled": False}, "log_level": "warning"}
        t0 = time.perf_counter()
        d = Daemon(load_config(None, log_dirs=[str(kafka.log_dir)], work_dir=str(tmp / "work"), **base),
                   once=True).start()
        assert d.run_once() == 0
        d.stop()
        print(f"tiered in {time.perf_counter() - t0:.1f}s", flush=True)

        def fetcher(name: str, **read: Any) -> RemoteFetcher:
            shutil.rmtree(tmp / name, ignore_errors=True)
            return RemoteFetcher.from_config(load_config(None, work_dir=str(tmp / name), read=read, **base))

        with fetcher("probe") as f:
            plan = f.plan(TOPIC, 0)
            end = plan.log_end
            seg_bytes = sum(s.metadata.segment_size_in_bytes for s in plan.segments)
            mds = [s.metadata for s in plan.segments]
            if weed is not None:
                sources = [f.rsm.key(md, SegmentFileType.SEGMENT) for md in mds]  # type: ignore[attr-defined]
            else:
                sources = [str(f.rsm.path_of(md, SegmentFileType.SEGMENT)) for md in mds]  # type: ignore[attr-defined]
        print(f"remote: {len(mds)} segments, offsets [0, {end}), {seg_bytes / MB:.0f} MB", flush=True)
        ref = broker_records(bs, end)
        want = table_digest({0: ref})
        rec.facts.update(records=end, segments=len(mds), segment_bytes=seg_bytes, reference_digest=want,
                         storage=args.storage)

        def check_fetch(res: Any, off: int) -> None:
            got = read_arrow(res.records, topic=TOPIC, partition=0) if res.records else None
            if got is None or got.num_rows == 0:
                raise BenchFailure(f"fetch at {off}: no records")
            got = got.filter(pa.compute.greater_equal(got.column("offset"), off))
            first = int(got.column("offset")[0].as_py())
            if first != off or table_digest({0: got}) != table_digest({0: ref.slice(off, got.num_rows)}):
                raise BenchFailure(f"fetch at {off}: records differ from the broker's")

        rnd = random.Random(1)
        cold: list[float] = []
        for _ in range(args.cold_samples):
            with fetcher("cold") as f:
                off = rnd.randrange(end)
                t0 = time.perf_counter()
                res = f.fetch(TOPIC, 0, off, max_bytes=MB, timeout_ms=60000)
                cold.append((time.perf_counter() - t0) * 1000)
                check_fetch(res, off)
        with fetcher("warm") as f:
            for md in mds:  # warm the index cache
                f.indexes.get(md)
            warm: list[float] = []
            for _ in range(args.samples):
                off = rnd.randrange(end)
                t0 = time.perf_counter()
                res = f.fetch(TOPIC, 0, off, max_bytes=MB, timeout_ms=60000)
                warm.append((time.perf_counter() - t0) * 1000)
                check_fetch(res, off)
        if cold and warm:
            rec.facts["fetch_1mb_ms"] = {
                "cold": {"p50": pct(cold, 50), "p99": pct(cold, 99), "samples": len(cold)},
                "warm": {"p50": pct(warm, 50), "p99": pct(warm, 99), "samples": len(warm)}}
            print(f"fetch 1 MB random: cold p50 {pct(cold, 50):.1f} ms p99 {pct(cold, 99):.1f} ms; "
                  f"warm p50 {pct(warm, 50):.1f} ms p99 {pct(warm, 99):.1f} ms (every answer checked)",
                  flush=True)

        conf_path = tmp / "worker.json"
        conf_path.write_text(json.dumps({"tmp": str(tmp), "base": base}))
        if args.pin:
            from bench_kafka_endpoint import pin_tree

            if len(os.sched_getaffinity(0)) < 2:
                raise SystemExit("--pin needs 2 CPUs")
            servers = [n.proc.pid for n in kafka._nodes if n.proc] + (
                [weed.proc.pid] if weed is not None and weed.proc else [])
            served = sum(pin_tree(pid, {0}) for pid in servers)
            own = pin_tree(os.getpid(), {1}, descendants=False)  # the workers inherit it
            print(f"pinned: {served} serving threads to CPU 0, {own} of this process to CPU 1", flush=True)
        workers = {"": ScanWorker("new", conf_path, None, tmp, args.perf)}
        for v in args.variant:
            vname, _, code = v.partition(":")
            workers[vname] = ScanWorker(vname, conf_path, str(Path(code).resolve()), tmp, args.perf)
        settings: dict[str, dict[str, int]] = {}
        for v in args.read_variant:
            vname, _, pairs = v.partition(":")
            settings[vname] = {k: int(val) for k, _, val in (p.partition("=") for p in pairs.split(","))}
        tuned = {vname: ScanWorker(vname, conf_path, None, tmp, args.perf) for vname in settings}
        # every scan case in a process of its own: no case runs on the heap another case left
        plain = ScanWorker("no-read-ahead", conf_path, None, tmp, args.perf)
        processes = [*workers.values(), *tuned.values(), plain]
        spies = []
        if args.py_spy is not None:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            for w in processes:
                spies.append(subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "-r", "50",
                     "--threads", *([] if args.py_spy_cpu else ["--idle"]), "-f", "raw", "-o",
                     str(args.py_spy / f"scan-{w.name}.txt"),
                     "-p", str(w.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if args.perf is not None:
            args.perf.mkdir(parents=True, exist_ok=True)
            for w in processes:
                spies.append(subprocess.Popen(
                    ["perf", "record", "-q", "-g", "-F", "997", "-k", "CLOCK_MONOTONIC",
                     "-o", str(args.perf / f"perf-{w.name}.data"),
                     "-p", str(w.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        client = weed.boto3_client() if weed is not None else None

        def floor() -> Result:
            total, cpu, digests = 0.0, 0.0, set()
            for _ in range(args.repeat):
                dl = tmp / "download"
                shutil.rmtree(dl, ignore_errors=True)
                dl.mkdir()
                c0, t0 = _cpu(), time.perf_counter()
                for i, src in enumerate(sources):
                    if client is not None:
                        client.download_file(storage["config"]["bucket"], src, str(dl / f"{i:06d}.log"))
                    else:
                        shutil.copyfile(src, dl / f"{i:06d}.log")
                total += time.perf_counter() - t0
                cpu += _cpu() - c0
                tables = [read_arrow(dl / f"{i:06d}.log", topic=TOPIC, partition=0)
                          for i in range(len(sources))]
                table = pa.concat_tables(tables)
                table = table.filter(pa.compute.less(table.column("offset"), end))
                digests.add(table_digest({0: table}))
                shutil.rmtree(dl, ignore_errors=True)
            return Result(total, digests.pop() if len(digests) == 1 else f"differs: {sorted(digests)}",
                          seg_bytes * args.repeat, table.num_rows, {"cpu_s": cpu})

        floor_name = "boto3 download_file" if client is not None else "shutil.copyfile"
        cases: dict[str, Any] = {
            "scan, read-ahead": lambda: workers[""].scan(seg_bytes, args.repeat),
            "scan, no read-ahead": lambda: plain.scan(seg_bytes, args.repeat, read_ahead_chunks=0,
                                                      read_ahead_bytes=0),
            floor_name: floor}
        for vname in workers:
            if vname:
                cases[f"scan, {vname}"] = lambda w=workers[vname]: w.scan(seg_bytes, args.repeat)
        for vname, w in tuned.items():
            cases[f"scan, {vname}"] = lambda w=w, read=settings[vname]: w.scan(seg_bytes, args.repeat, **read)
        try:
            rows = run_rounds(cases, args.rounds, label="scan", expect=want)
        finally:
            for spy in spies:
                spy.send_signal(2)
                spy.wait(timeout=60)
            for w in processes:
                w.close()
        rec.section("scan", rows)
        counted = [r for r in rows if not r["warmup"]]
        print("CPU per case (user + system, all threads of the process; median of the counted rounds): "
              + ", ".join(f"{name} {statistics.median(r['cases'][name]['cpu_s'] for r in counted):.3f}s"
                          for name in cases), flush=True)
        print("page faults per case (median): "
              + ", ".join(f"{name} {statistics.median(r['cases'][name]['faults'] for r in counted):.0f}"
                          for name in cases if "faults" in counted[0]["cases"][name]), flush=True)
        print("of which the scan's own thread (decoding; the rest is the GET threads): "
              + ", ".join(f"{name} {statistics.median(r['cases'][name]['main_cpu_s'] for r in counted):.3f}s"
                          for name in cases if "main_cpu_s" in counted[0]["cases"][name]),
              flush=True)
        for r in rows:
            for v in r["cases"].values():
                v["mb_per_s"] = v["bytes"] / MB / v["seconds"]
        print(f"\n{args.size_mb} MB, {args.segment_mb} MB segments, storage {args.storage}, "
              f"median of per-round ratios:")
        rec.add(headline(rows, f"scan to Arrow vs raw {'download' if client else 'copy'} of the segments "
                         f"({args.storage})", "scan, read-ahead", floor_name,
                         1.0 if client is not None else None))
        rec.add(headline(rows, f"read-ahead on vs off ({args.storage})", "scan, read-ahead",
                         "scan, no read-ahead", 1.0, ">= 1x"))
        for vname in settings:
            rec.add(headline(rows, f"scan, {vname} vs raw download ({args.storage})", f"scan, {vname}",
                             floor_name, None))
        for vname in workers:
            if vname:
                rec.add(headline(rows, f"scan, this code vs {vname} ({args.storage})", "scan, read-ahead",
                                 f"scan, {vname}", None))
                rec.add(headline(rows, f"scan, {vname} vs raw download ({args.storage})", f"scan, {vname}",
                                 floor_name, None))
        rec.save(not args.no_save)
    finally:
        kafka.stop()
        if weed is not None:
            weed.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
