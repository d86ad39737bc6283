"""HTTP API load benchmark: N concurrent clients against ``rlm serve`` vs the read core in-process.

Scenario (issue 13): a standalone log dir (``--partitions`` partitions of ~``--mib`` MiB each,
256 KiB segments) is tiered by the daemon's ``--once`` to local storage + the file metadata store;
``rlm serve`` runs over it as a real subprocess on 127.0.0.1. A query is ``GET
/v1/topics/T/partitions/P/records?offset=O&max_bytes=65536`` with ``Accept:
application/vnd.kafka.record-batches``; the set is ``--queries`` random (partition, offset) pairs
spread over the whole remote range.

The reference: the bytes the read core returns for every query in this process, straight from
the storage plugin and metadata store (``RemoteFetcher.fetch``, no HTTP).

Per concurrency level (default N = 1, 16, 64, same server, same run), interleaved rounds (one
warm-up, then ``--rounds``) of two cases doing the same work, every query once:

* ``rlm serve, N client(s)``: N threads, each with its own keep-alive connection (``http.client``),
  client ``c`` sending queries ``c, c + N, ...``; p50/p99 of every request, the server's RSS before
  and after the round (and its peak, VmHWM);
* ``read core, 1 thread, no HTTP``: the named alternative, the same queries through a
  ``RemoteFetcher`` in this process (its own caches, warm after the warm-up round).

Every round, the digest of all answers in query order must equal the reference's in both cases
(and no request may fail or be answered with a non-200), or the benchmark fails (exit 2); the
headline is the median of per-round rate ratios. Raw results: ``docs/data/bench-http-load.json``
(unless ``--no-save``). ``--json`` also runs the earlier time-bounded load (``--seconds`` per level,
clients looping over the queries, every body compared byte for byte) and writes it in the format
docs/reliability.md reads. Clients and server share the machine's cores. Not run by the tests
(``tests/fetcher_http/test_load.py`` runs 16 clients for a few seconds and checks outcomes)::

    .venv/bin/python benchmarks/bench_http_load.py [--clients 1,16,64] [--rounds 3] \\
        [--json docs/data/load-http.json --seconds 10]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import (  # noqa: E402 - the benchmarks' shared module sits next to this script
    BenchFailure,
    Recorder,
    Result,
    headline,
    latency_summary,
    quiet_logs,
    run_rounds,
)

TOPIC = "httpload"
RAW = "application/vnd.kafka.record-batches"
MAX_BYTES = 65536


# ---- data -------------------------------------------------------------------------------------
def tier(root: Path, partitions: int, mib: float) -> Path:
    """Writes and tiers the data; returns the ``rlm serve`` configuration file."""
    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from rlm.log.checkpoints import MetaProperties
    from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
    from rlm.types import KafkaUuid, TopicPartition

    logs, work = root / "logs", root / "tier"
    tid = KafkaUuid.random()
    rng = random.Random(7)
    batches = max(2, int(mib * (1 << 20) / (20 * 230)))
    ends = []
    for p in range(partitions):
        w = PartitionWriter(logs / f"{TOPIC}-{p}", topic_id=tid, config=WriterConfig(segment_bytes=256 << 10))
        for b in range(batches):
            w.append(
                [(f"k{p}-{b}-{i}".encode(), rng.randbytes(200)) for i in range(20)],
                producer_id=100 + p,
                producer_epoch=0,
            )
        w.close()
        ends.append((TopicPartition(TOPIC, p), w.log_end_offset))
    write_log_dir_files(logs, ends, meta=MetaProperties(1, "http-load-cluster-0001", 1))
    d = Daemon(
        load_config(
            None,
            log_dirs=[str(logs)],
            work_dir=str(work),
            http={"enabled": False},
            topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
        ),
        once=True,
    ).start()
    try:
        assert d.run_once() == 0, "tiering failed"
    finally:
        d.stop()
    return serve_config(root, work, root / "serve")


def serve_config(root: Path, tiered_work: Path, serve_work: Path, **read: Any) -> Path:
    cfg = root / "serve.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "work_dir": str(serve_work),
                "storage": {"plugin": "local", "config": {"root": str(tiered_work / "remote")}},
                "metadata": {"manager": "file", "config": {"dir": str(tiered_work / "metadata")}},
                "read": {"http_host": "127.0.0.1", **read},
            }
        )
    )
    return cfg


@dataclass(frozen=True)
class Query:
    topic: str
    partition: int
    offset: int

    @property
    def path(self) -> str:
        return (
            f"/v1/topics/{self.topic}/partitions/{self.partition}/records"
            f"?offset={self.offset}&max_bytes={MAX_BYTES}"
        )


def expected_answers(
    cfg_path: Path, n: int, topic: str = TOPIC, seed: int = 1, timing_s: float = 2.0
) -> tuple[list[Query], list[bytes], float]:
    """``n`` random queries over every partition's remote range and the read core's answers (the
    oracle); also the seconds the read core takes for all of them on one thread (warm, mean of rounds)."""
    from fetcher.core import RemoteFetcher
    from rlm.config import load_config

    cfg = load_config(cfg_path)
    rng = random.Random(seed)
    with RemoteFetcher.from_config(cfg) as f:
        tps = sorted(f.topics()[topic], key=lambda t: t.partition)
        plans = {tp.partition: f.plan(topic, tp.partition) for tp in tps}
        queries = [
            Query(topic, p, rng.randrange(plans[p].log_start, plans[p].log_end))
            for p in (rng.choice(list(plans)) for _ in range(n))
        ]

        def read_all() -> list[bytes]:
            return [
                f.fetch(topic, q.partition, q.offset, max_bytes=MAX_BYTES, timeout_ms=60_000).records
                for q in queries
            ]

        answers = read_all()
        rounds, t0 = 0, time.perf_counter()
        while rounds < 1 or time.perf_counter() - t0 < timing_s:  # warm rounds
            assert read_all() == answers
            rounds += 1
        core_s = (time.perf_counter() - t0) / rounds
    assert all(answers)
    return queries, answers, core_s


# ---- server -----------------------------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``rlm serve`` as a subprocess on 127.0.0.1."""

    def __init__(self, cfg_path: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rlm.cli",
                    "serve",
                    "--config",
                    str(cfg_path),
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rlm serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                status, body = self.get("/health", timeout=2)
                if status == 200 and json.loads(body)["status"] == "ok":
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"rlm serve not healthy after {timeout} s:\n{self.log.read_text()}")

    def memory_kib(self) -> dict[str, int]:
        """VmRSS (now) and VmHWM (peak) of the server process, KiB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


# ---- load -------------------------------------------------------------------------------------
@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    ok_bytes: int = 0
    wrong: int = 0
    errors: Counter[str] = field(default_factory=Counter)


def _client(
    port: int, queries: list[Query], answers: list[bytes], start: int, until: float, tally: Tally
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    i = start
    while time.monotonic() < until:
        q = i % len(queries)
        i += 7
        t0 = time.perf_counter()
        try:
            conn.request("GET", queries[q].path, headers={"Accept": RAW})
            r = conn.getresponse()
            body = r.read()
        except (OSError, http.client.HTTPException) as e:
            tally.errors[type(e).__name__] += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        tally.latencies.append(time.perf_counter() - t0)
        if r.status != 200:
            tally.errors[f"http_{r.status}"] += 1
        elif body != answers[q]:
            tally.wrong += 1
        else:
            tally.ok_bytes += len(body)
    conn.close()


def load(
    server: Server, queries: list[Query], answers: list[bytes], clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` threads for ``seconds``; throughput, latency quantiles, errors, server memory."""
    before = server.memory_kib()
    tallies = [Tally() for _ in range(clients)]
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(
            target=_client, args=(server.port, queries, answers, c * 13, until, t), name=f"client-{c}"
        )
        for c, t in enumerate(tallies)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    elapsed = time.perf_counter() - t0
    after = server.memory_kib()
    lat = sorted(x for t in tallies for x in t.latencies)
    errors: Counter[str] = Counter()
    for tally in tallies:
        errors.update(tally.errors)
    ok = len(lat) - sum(v for k, v in errors.items() if k.startswith("http_")) - sum(t.wrong for t in tallies)

    def q(p: float) -> float:
        return 1000 * lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    return {
        "clients": clients,
        "seconds": elapsed,
        "requests": len(lat),
        "ok": ok,
        "requests_per_s": len(lat) / elapsed,
        "mib_per_s": sum(t.ok_bytes for t in tallies) / elapsed / (1 << 20),
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
        "max_ms": 1000 * lat[-1] if lat else float("nan"),
        "errors": sum(errors.values()),
        "errors_by_kind": dict(errors),
        "wrong": sum(t.wrong for t in tallies),
        "rss_before_mib": before["VmRSS"] / 1024,
        "rss_after_mib": after["VmRSS"] / 1024,
        "rss_peak_mib": after["VmHWM"] / 1024,
        "stuck_clients": sum(t.is_alive() for t in threads),
    }


# ---- interleaved rounds ---------------------------------------------------------------------
def answers_digest(bodies: list[bytes]) -> str:
    """Digest of every answer, in query order (length-prefixed)."""
    h = hashlib.blake2b(digest_size=16)
    for b in bodies:
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def serve_all(server: Server, queries: list[Query], clients: int) -> Result:
    """Every query once over HTTP, spread over ``clients`` threads (client ``c`` sends queries ``c,
    c + clients, ...`` on its own keep-alive connection); an error or a non-200 fails the benchmark,
    the bodies' digest is compared by the round."""
    bodies: list[bytes | None] = [None] * len(queries)
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            for i in range(c, len(queries), clients):
                t0 = time.perf_counter()
                conn.request("GET", queries[i].path, headers={"Accept": RAW})
                r = conn.getresponse()
                body = r.read()
                lat[c].append((time.perf_counter() - t0) * 1000)
                if r.status != 200:
                    errors.append(f"{queries[i].path}: HTTP {r.status}")
                bodies[i] = body
        except (OSError, http.client.HTTPException) as e:
            errors.append(f"client {c}: {type(e).__name__}: {e}")
        finally:
            conn.close()

    before = server.memory_kib()
    threads = [threading.Thread(target=client, args=(c,), name=f"client-{c}") for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = server.memory_kib()
    if errors:
        raise BenchFailure(f"{clients} clients: {len(errors)} error(s), first: {errors[0]}")
    got = [b or b"" for b in bodies]
    return Result(wall, answers_digest(got), sum(map(len, got)), len(queries),
                  {"latencies_ms": [x for per in lat for x in per], "requests_per_s": len(queries) / wall,
                   "rss_before_mib": before["VmRSS"] / 1024, "rss_after_mib": after["VmRSS"] / 1024,
                   "rss_peak_mib": after["VmHWM"] / 1024})


def core_all(fetcher: Any, queries: list[Query]) -> Result:
    """The alternative: the same queries through the read core in this process, one thread."""
    t0 = time.perf_counter()
    got = [fetcher.fetch(q.topic, q.partition, q.offset, max_bytes=MAX_BYTES, timeout_ms=60_000).records
           for q in queries]
    wall = time.perf_counter() - t0
    return Result(wall, answers_digest(got), sum(map(len, got)), len(queries),
                  {"requests_per_s": len(queries) / wall})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1,16,64", help="concurrency levels, comma-separated")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--mib", type=float, default=16.0, help="MiB of records per partition")
    ap.add_argument("--queries", type=int, default=256, help="queries per case and round")
    ap.add_argument("--rounds", type=int, default=3, help="counted interleaved rounds (after one warm-up)")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="with --json: duration of each level of the time-bounded load")
    ap.add_argument("--json", type=Path, help="also run the time-bounded load per level and write it here "
                    "(docs/data/load-http.json, the format docs/reliability.md reads)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-http-load.json")
    args = ap.parse_args()
    quiet_logs()
    rec = Recorder("http-load", args)
    from fetcher.core import RemoteFetcher
    from rlm.config import load_config

    levels = [int(n) for n in args.clients.split(",")]
    rows_legacy: list[dict[str, Any]] = []
    latencies: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="rlm-bench-http-") as tmp:
        root = Path(tmp)
        cfg = tier(root, args.partitions, args.mib)
        queries, answers, core_s = expected_answers(cfg, args.queries)
        want = answers_digest(answers)
        rec.facts.update(partitions=args.partitions, mib_per_partition=args.mib, queries=len(queries),
                         max_bytes=MAX_BYTES, mean_answer_bytes=sum(map(len, answers)) / len(answers),
                         reference_digest=want)
        (root / "core").mkdir()
        core_cfg = serve_config(root / "core", root / "tier", root / "core" / "work")
        server = Server(cfg, root / "serve.log")
        try:
            server.wait_healthy()
            with RemoteFetcher.from_config(load_config(core_cfg)) as core:
                for n in levels:
                    ours = f"rlm serve, {n} client(s)"
                    rows = run_rounds({ours: functools.partial(serve_all, server, queries, n),
                                       "read core, 1 thread, no HTTP": lambda: core_all(core, queries)},
                                      args.rounds, label=f"{n} client(s)", expect=want)
                    for r in rows:
                        lat = r["cases"][ours].pop("latencies_ms")
                        r["cases"][ours].update({f"{k}_ms": v for k, v in latency_summary(lat).items()
                                                 if k != "samples"})
                        if not r["warmup"]:
                            latencies.setdefault(ours, []).extend(lat)
                    rec.section(f"{n} client(s)", rows)
                    print(f"{n} client(s), median of per-round ratios:")
                    rec.add(headline(rows, f"HTTP API, {n} client(s), vs the read core in-process (1 thread)",
                                     ours, "read core, 1 thread, no HTTP", None))
            if args.json:
                rows_legacy = [load(server, queries, answers, n, args.seconds) for n in levels]
            health, _ = server.get("/health")
        finally:
            code = server.stop()
    rec.facts["latency_ms"] = {f"request, {k}": latency_summary(v) for k, v in latencies.items()}
    rec.facts.update(healthy_after=health == 200, exit_status=code)
    print(f"server healthy after: {health == 200}; exit status on SIGTERM: {code}")
    if code != 0 or health != 200:
        raise BenchFailure(f"rlm serve: healthy after the rounds {health == 200}, exit status {code}")
    if args.json:
        print_levels(rows_legacy)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "benchmark": "benchmarks/bench_http_load.py",
            "cpus": os.cpu_count(),
            "measured": time.strftime("%Y-%m-%d", time.gmtime()),
            "seconds_per_level": args.seconds,
            "partitions": args.partitions,
            "mib_per_partition": args.mib,
            "queries": len(queries),
            "max_bytes": MAX_BYTES,
            "healthy_after": health == 200,
            "exit_status": code,
        }
        core_rates = {"requests_per_s": len(queries) / core_s,
                      "mib_per_s": sum(map(len, answers)) / core_s / (1 << 20)}
        args.json.write_text(
            json.dumps({**meta, "levels": rows_legacy, "read_core_1_thread": core_rates}, indent=1,
                       sort_keys=True) + "\n"
        )
    rec.save(not args.no_save)


def print_levels(rows: list[dict[str, Any]]) -> None:
    """The time-bounded load's table (``--json``)."""
    print(
        f"{'clients':>8} {'req/s':>8} {'MiB/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'errors':>6} "
        f"{'wrong':>5} {'RSS before':>10} {'RSS after':>9} {'RSS peak':>8}"
    )
    for r in rows:
        print(
            f"{r['clients']:>8} {r['requests_per_s']:>8.0f} {r['mib_per_s']:>7.1f} {r['p50_ms']:>7.1f} "
            f"{r['p99_ms']:>7.1f} {r['max_ms']:>7.0f} {r['errors']:>6} {r['wrong']:>5} "
            f"{r['rss_before_mib']:>10.0f} {r['rss_after_mib']:>9.0f} {r['rss_peak_mib']:>8.0f}"
            + (f"  {r['errors_by_kind']}" if r["errors"] else "")
        )


if __name__ == "__main__":
    main()
