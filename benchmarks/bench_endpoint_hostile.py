"""The Kafka endpoint under hostile clients: SASL connection set-up, and reads under a flood (not a test).

Starts the security suite's broker (SASL_SSL only, PLAIN + SCRAM, ACLs: ``tests/security``'s
cluster class, through ``bench_kafka_endpoint.secure_cluster``), produces ``--size-mb`` of 1 KB
records into a 4-partition topic, tiers the rolled segments to a local directory (file metadata
store) and starts ``rlm kafka-serve`` over them with TLS, relaying logins to the broker.

(a) **Connection set-up with SASL per second**, PLAIN and SCRAM-SHA-512: ``--logins`` connections
per case and round, ``--concurrency`` at a time, each a TCP connect, a TLS handshake, ApiVersions,
SaslHandshake and SaslAuthenticate (the product's own SASL client, ``BrokerLogin``) and a close;
the endpoint against the broker's own SASL_SSL listener, interleaved rounds. Every login must
succeed, or the benchmark fails. The endpoint relays each login to the broker (one broker
connection and login per client login), so its rate is bounded by the broker's: a figure for
context, no goal.

(b) **Throughput under a flood**: one confluent-kafka consumer reads the tiered range of every
partition through the endpoint ``--passes`` times in a row (one consumer after another, each
logging in; a round long enough that the flood's turnover at the 10 s login deadline falls inside
it, and that one scheduler hiccup of the shared machine is a small part of it), with no hostile
connections (``quiet``) and while ``--flood`` idle hostile connections are held (``flooded-N``:
half a finished TLS handshake then silence, half a size prefix and never the request, from 40
loopback addresses other than the consumer's, each re-opened 0.5 s after the endpoint closes it:
the soak test's hostile process, ``tests/security/test_soak.py``), interleaved rounds; the records
of every pass digested and equal in every pass, case and round. Goal: flooded >= 0.9x quiet.

Beside the rate, each read records the CPU seconds the endpoint process spent (``/proc``): what
the held connections cost the endpoint, which on a machine shared with other work is the steadier
figure (the rate follows whatever else runs). Its median ratio to quiet is listed as a target for
context. ``--read-setting kafka_login_timeout_ms=3600000`` (and the connection caps raised the same
way) holds the flood with no turnover at all: what holding idle connections costs, apart from what
re-opening them costs (a TLS handshake each); such a run is not of the default endpoint, so it is
saved as ``bench-endpoint-hostile-held.json`` and its rates have no goal (``--no-logins`` skips
(a)). ``--py-spy DIR`` records a profile of the endpoint per read.

    .venv/bin/python benchmarks/bench_endpoint_hostile.py --size-mb 512 --rounds 6 --pin

``--pin`` runs the serving side (the broker's JVM and the endpoint) on CPU 0 and this process (the
consumer, the logins) and the flood's process on CPU 1, as ``bench_kafka_endpoint.py --pin`` does:
on a 2-core machine shared with other work the unpinned rounds measure the scheduler as much as
the endpoint. The flood's process runs there at nice 19: an idle flood uses no CPU, and what its
re-opening costs the attacker (``flood_cpu_s``) comes from the consumer's idle time, not its share
(in a deployment it runs on the attacker's machine); what it costs the endpoint shows in the
endpoint's CPU and rate.

The endpoint runs with ``kafka_connection_creation_rate_per_ip`` 0 (no limit): (a) measures how
fast one address sets up connections, which that quota exists to cap (at its default, 50 a second
after a burst of 500, (a) would measure the quota); the flood of (b) opens at most ~20 a second
per address, below the default, so the quota would not change (b).

Raw results: ``docs/data/bench-endpoint-hostile[-held].json`` (unless ``--no-save``), rendered into
docs/performance.md by ``scripts/gen_performance_doc.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import signal
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_kafka_endpoint import (  # noqa: E402
    MB,
    PARTITIONS,
    create_secure_topic,
    one_round,
    pin_tree,
    produce,
    reader_conf,
    secure_cluster,
    serve,
    tree_cpu_seconds,
)
from benchlib import BenchFailure, Recorder, Result, headline, quiet_logs, run_rounds, target  # noqa: E402

MECHANISMS = ("PLAIN", "SCRAM-SHA-512")
USER = "bob"  # READ on the topic and every group (create_secure_topic)
FLOOD_MIX = ("tls_idle", "prefix_only")  # the soak's kinds that hold a slot past the TLS handshake


# ---- (a) SASL connection set-up -----------------------------------------------------------------
async def _login(address: str, ctx: ssl.SSLContext, mechanism: str, password: str) -> None:
    """One connection: TLS, ApiVersions, the SASL login, close; raises when refused."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    from fetcher.cluster_auth import BrokerLogin
    from tests.security.frames import api_versions, frame

    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx, server_hostname=host)
    corr = itertools.count(1)

    async def call(req: Any) -> Any:
        key, version = req.__api_key__, req.__version__
        writer.write(frame(key, version, next(corr), req))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        data = await reader.readexactly(size)
        cls = load_response_schema(key, version)
        _, n = entity_reader(cls.__header_schema__)(data, 0)
        return entity_reader(cls)(data, n)[0]

    try:
        await call(api_versions())  # what every client sends first
        await BrokerLogin("SASL_SSL", mechanism, USER, password, ctx).authenticate(call, address)
    finally:
        writer.close()


async def _logins(address: str, ca: str, mechanism: str, password: str, count: int, concurrency: int) -> int:
    ctx = ssl.create_default_context(cafile=ca)
    todo = iter(range(count))
    done = 0

    async def worker() -> None:
        nonlocal done
        for _ in todo:
            await _login(address, ctx, mechanism, password)
            done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def login_case(address: str, ca: str, mechanism: str, password: str, count: int, concurrency: int) -> Result:
    t0 = time.perf_counter()
    done = asyncio.run(_logins(address, ca, mechanism, password, count, concurrency))
    seconds = time.perf_counter() - t0
    return Result(seconds, f"{done} logins", records=done, extra={"logins_per_s": round(done / seconds, 1)})


# ---- (b) throughput under a flood ---------------------------------------------------------------
class Profiler:
    """``--py-spy DIR``: one py-spy profile (raw collapsed stacks, samples only while a thread runs)
    of the endpoint process per read, ``DIR/<case>-<n>.txt``, to see where a flood's cost goes."""

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self._count: dict[str, int] = {}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def start(self, case: str, pid: int) -> subprocess.Popen[bytes] | None:
        if self.out is None:
            return None
        n = self._count[case] = self._count.get(case, -1) + 1
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "-r", "100",
             "--threads", "-f", "raw", "-o", str(self.out / f"{case}-{n}.txt"), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            proc.wait(60)


def read_case(conf: dict[str, str], topic: str, ends: dict[int, int], server: int, passes: int,
              case: str = "quiet", profiler: Profiler | None = None, flood: int | None = None) -> Result:
    """``passes`` reads of the tiered range by one consumer after another (a round long enough
    that the flood's login-deadline turnover, every 10 s, falls inside it, and that one scheduler
    hiccup of the shared machine is a small part of it; every pass's records must digest the same),
    with the CPU seconds the endpoint process (and the flood's process, when there is one) spent
    meanwhile: the endpoint's CPU per read is what an idle connection would cost it, and unlike
    the rate it barely depends on what else the machine runs."""
    spy = profiler.start(case, server) if profiler is not None else None
    cpu0, flood0 = tree_cpu_seconds(server), tree_cpu_seconds(flood) if flood else 0.0
    seconds, size, n, digests, firsts = 0.0, 0, 0, set(), []
    try:
        for _ in range(passes):
            got, got_size, got_seconds, dig, first = one_round(conf, topic, ends, 1)
            seconds, size, n = seconds + got_seconds, size + got_size, n + got
            digests.add(dig)
            firsts.append(first)
    finally:
        cpu = tree_cpu_seconds(server) - cpu0
        flood_cpu = tree_cpu_seconds(flood) - flood0 if flood else 0.0
        Profiler.stop(spy)
    if len(digests) != 1:
        raise BenchFailure(f"{case}: the passes of one round read different records: {sorted(digests)}")
    extra = {"mb_per_s": round(size / MB / seconds, 1), "first_record_s": round(max(firsts), 3),
             "endpoint_cpu_s": round(cpu, 3), "passes": passes}
    if flood:
        extra["flood_cpu_s"] = round(flood_cpu, 3)
    else:
        print(f"  {case}: {extra['mb_per_s']} MB/s, endpoint CPU {cpu:.2f} s", flush=True)
    return Result(seconds, digests.pop(), bytes=size, records=n, extra=extra)


def flooded_case(conf: dict[str, str], topic: str, ends: dict[int, int], server: int, passes: int,
                 port: int, ca: str, flood: int, pin: bool = False,
                 profiler: Profiler | None = None) -> Result:
    """The reads while ``flood`` idle hostile connections are held (a process of their own, all of
    them opened once before the clock starts; stopped after the reads). With ``pin`` the flood runs
    on the consumer's CPU at the lowest priority (nice 19): in a deployment the attacker's own
    retry loop runs on the attacker's machine, and here it should cost the endpoint what it costs
    the endpoint, not take the consumer's core (its CPU is recorded, ``flood_cpu_s``)."""
    from tests.security.test_soak import hostile_main

    fds = _open_fds(server)
    mp = multiprocessing.get_context("spawn")
    results = mp.Queue()
    opened = mp.Value("i", 0)
    mix = {kind: flood // len(FLOOD_MIX) for kind in FLOOD_MIX}
    proc = mp.Process(target=hostile_main, args=(port, ca, 3600.0, results, opened, mix), daemon=True)
    proc.start()
    try:
        if pin and proc.pid is not None:
            pin_tree(proc.pid, {1})  # the attacker's process beside the consumer, not the endpoint
            os.setpriority(os.PRIO_PROCESS, proc.pid, 19)  # its event loop's thread; later ones inherit
        give_up = time.monotonic() + 120
        while opened.value < sum(mix.values()):
            if time.monotonic() > give_up or not proc.is_alive():
                raise BenchFailure(f"the flood opened {opened.value} of {sum(mix.values())} connections")
            time.sleep(0.1)  # polling another process's counter: no event to wait on
        before = opened.value
        res = read_case(conf, topic, ends, server, passes, f"flooded-{flood}", profiler, proc.pid)
        res.extra["flood_reopened_during_read"] = opened.value - before
        x = res.extra
        print(f"  flooded-{flood}: {x['mb_per_s']} MB/s, endpoint CPU {x['endpoint_cpu_s']:.2f} s, flood CPU "
              f"{x['flood_cpu_s']:.2f} s, {x['flood_reopened_during_read']} re-opened during the reads",
              flush=True)
        return res
    finally:
        proc.terminate()
        proc.join(30)
        _wait_closed(server, fds)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _wait_closed(server: int, before: int) -> None:
    """Wait until the endpoint has closed the flood's connections (its open files back to what they
    were before the flood, give or take the consumers' few): otherwise their tear-down (a close and
    for some a log line each) runs into the next case's read, and its CPU into that case's."""
    give_up = time.monotonic() + 60
    while _open_fds(server) > before + 16:
        if time.monotonic() > give_up:
            raise BenchFailure(f"the endpoint still holds {_open_fds(server) - before} more files a minute "
                               "after the flood ended")
        time.sleep(0.1)  # polling another process's file table: no event to wait on


def cpu_target(rows: list[dict[str, Any]], flooded: str, n: int) -> dict[str, Any]:
    """The endpoint's CPU per read with ``n`` connections held, against none: the median of the
    per-round ratios (the same passes in both), with the rounds' spread in the text."""
    ratios = [r["cases"][flooded]["endpoint_cpu_s"] / r["cases"]["quiet"]["endpoint_cpu_s"]
              for r in rows if not r["warmup"]]
    entry = target(f"endpoint CPU per read with {n} idle hostile connections held, against none",
                   statistics.median(ratios), "x",
                   f"context (1.0 = no cost; rounds {min(ratios):.2f}-{max(ratios):.2f})", None)
    entry["value_rounds"] = [round(x, 3) for x in ratios]
    return entry


# ---- main ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (after one warm-up)")
    ap.add_argument("--logins", type=int, default=200, help="connections per case and round in (a)")
    ap.add_argument("--concurrency", type=int, default=4, help="logins at once in (a)")
    ap.add_argument("--flood", type=int, action="append", default=None,
                    help="idle hostile connections held in (b), one case per value (default: 100 and 400; "
                    "the endpoint keeps at most 128 not logged in, so 400 also makes it close the oldest "
                    "and the attacker open them again)")
    ap.add_argument("--pin", action="store_true",
                    help="serving side (broker, endpoint) on CPU 0; this process and the flood on CPU 1")
    ap.add_argument("--passes", type=int, default=8,
                    help="reads of the tiered range per case and round in (b), timed together (8 of the "
                    "512 MB range: about 10 s, so the flood's 10 s login-deadline turnover falls inside)")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record a py-spy profile of the endpoint per read in (b) into DIR")
    ap.add_argument("--read-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a `read:` setting of the endpoint (YAML value), e.g. kafka_login_timeout_ms=600000 "
                    "and kafka_max_unauthenticated_connections=1024: a flood held with no turnover, to "
                    "tell what holding idle connections costs from what re-opening them costs")
    ap.add_argument("--no-logins", action="store_true", help="skip (a)")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-endpoint-hostile.json")
    args = ap.parse_args()

    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from tests.security.conftest import PASSWORDS

    quiet_logs()
    # with settings of its own the endpoint is not the product's default one: its results are a
    # separate record (bench-endpoint-hostile-held.json) whose rates have no goal
    held = bool(args.read_setting)
    rec = Recorder("endpoint-hostile-held" if held else "endpoint-hostile", args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    cluster = secure_cluster(tmp)
    endpoint: subprocess.Popen[str] | None = None
    try:
        topic = "bench"
        total = args.size_mb * MB
        create_secure_topic(cluster, topic, min(max(total // PARTITIONS // 5, MB), 256 * MB))
        produce(cluster.bootstrap, topic, total, cluster.client_config)
        conf: dict[str, Any] = {
            "log_dirs": [str(cluster.log_dir)], "work_dir": str(tmp / "daemon"),
            "bootstrap_servers": cluster.bootstrap, "kafka_client": cluster.client_config,
            "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
            "metadata": {"manager": "file", "config": {"dir": str(tmp / "metadata")}},
            "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1}],
            "http": {"enabled": False}, "log_level": "warning",
        }
        d = Daemon(load_config(None, **conf), once=True).start()
        assert d.run_once() == 0
        d.stop()
        serving = {k: v for k, v in conf.items() if k not in ("log_dirs", "topics")}
        serving.update(work_dir=str(tmp / "serve"), read={
            "kafka_merged": False, "kafka_connection_creation_rate_per_ip": 0,  # see the module doc
            "kafka_security": {"security.protocol": "SASL_SSL",
                               "ssl.keystore.location": str(cluster.endpoint_keystore)}})
        for kv in args.read_setting:
            key, sep, value = kv.partition("=")
            if not sep:
                raise SystemExit(f"--read-setting {kv!r}: expected KEY=VALUE")
            serving["read"][key] = yaml.safe_load(value)
        endpoint, address = serve(tmp, "endpoint", serving)
        if args.pin:
            if len(os.sched_getaffinity(0)) < 2:
                raise SystemExit("--pin needs 2 CPUs")
            broker = [n.proc.pid for n in cluster._nodes if n.proc]
            served = sum(pin_tree(pid, {0}) for pid in [*broker, endpoint.pid])
            own = pin_tree(os.getpid(), {1}, descendants=False)
            print(f"pinned: {served} serving threads to CPU 0, {own} of this process to CPU 1", flush=True)
        from fetcher import RemoteFetcher

        with RemoteFetcher.from_config(load_config(None, **serving)) as f:
            ends = {p: f.plan(topic, p).log_end for p in range(PARTITIONS)}
        assert all(e > 0 for e in ends.values()), ends
        print(f"tiered range per partition: {ends}", flush=True)
        ca = str(cluster.ca.path)
        password = PASSWORDS[USER]

        for mech in () if args.no_logins else MECHANISMS:
            rows = run_rounds({
                "broker": partial(login_case, cluster.bootstrap, ca, mech, password, args.logins,
                                  args.concurrency),
                "endpoint": partial(login_case, address, ca, mech, password, args.logins, args.concurrency),
            }, args.rounds, label=f"SASL set-up {mech}", expect=f"{args.logins} logins")
            rec.section(f"connection set-up, {mech}", rows)
            rec.add(headline(rows, f"SASL_SSL connections set up per second, {mech}, "
                             f"{args.concurrency} at a time", "endpoint", "broker", None))

        reader = {"bootstrap.servers": address, **reader_conf(cluster)}
        port = int(address.rsplit(":", 1)[1])
        floods = args.flood or [100, 400]
        spy = Profiler(args.py_spy)
        cases: dict[str, Any] = {"quiet": partial(read_case, reader, topic, ends, endpoint.pid, args.passes,
                                                  "quiet", spy)}
        for n in floods:
            cases[f"flooded-{n}"] = partial(flooded_case, reader, topic, ends, endpoint.pid, args.passes,
                                            port, ca, n, args.pin, spy)
        rows = run_rounds(cases, args.rounds, label="read under flood")
        rec.section("one consumer, tiered range, idle hostile connections or none", rows)
        for n in floods:
            rec.add(headline(rows, f"endpoint read rate with {n} idle hostile connections held, "
                             "against none", f"flooded-{n}", "quiet", None if held else 0.9))
            rec.add_target(cpu_target(rows, f"flooded-{n}", n))
        rec.facts["ends"] = ends
        rec.save(not args.no_save)
    finally:
        if endpoint is not None:
            endpoint.terminate()
            try:
                endpoint.wait(60)
            except subprocess.TimeoutExpired:
                endpoint.kill()
        cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
