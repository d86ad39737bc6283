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
partition through the endpoint, with no hostile connections (``quiet``) and while ``--flood``
idle hostile connections are held open (``flooded-N``: half a finished TLS handshake then silence,
half a size prefix and never the request, from 40 loopback addresses other than the consumer's,
each re-opened when the endpoint closes it: the soak test's hostile process,
``tests/security/test_soak.py``), interleaved rounds; the records of every round digested and
equal in both cases. Goal: flooded >= 0.9x quiet.

    .venv/bin/python benchmarks/bench_endpoint_hostile.py --size-mb 64 --rounds 5 --pin

``--pin`` runs the serving side (the broker's JVM and the endpoint) on CPU 0 and this process (the
consumer, the logins) and the flood's process on CPU 1, as ``bench_kafka_endpoint.py --pin`` does:
on a 2-core machine shared with other work the unpinned rounds measure the scheduler as much as
the endpoint. The flood shares the consumer's CPU: what it costs the endpoint shows in the
endpoint's rate, what it costs itself is the attacker's (``flood_cpu_s``).

The endpoint runs with ``kafka_connection_creation_rate_per_ip`` 0 (no limit): (a) measures how
fast one address sets up connections, which that quota exists to cap (at its default, 50 a second
after a burst of 500, (a) would measure the quota); the flood of (b) opens at most ~20 a second
per address, below the default, so the quota would not change (b).

Raw results: ``docs/data/bench-endpoint-hostile.json`` (unless ``--no-save``), rendered into
docs/performance.md by ``scripts/gen_performance_doc.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

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
from benchlib import BenchFailure, Recorder, Result, headline, quiet_logs, run_rounds  # noqa: E402

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
def read_case(conf: dict[str, str], topic: str, ends: dict[int, int], server: int,
              flood: int | None = None) -> Result:
    """One consumer's read of the tiered range, with the CPU seconds the endpoint process (and the
    flood's process, when there is one) spent meanwhile: on a 2-core machine the flood's own CPU
    is taken from the endpoint and the consumer, which the rate alone does not show."""
    cpu0, flood0 = tree_cpu_seconds(server), tree_cpu_seconds(flood) if flood else 0.0
    n, size, seconds, dig, first = one_round(conf, topic, ends, 1)
    extra = {"mb_per_s": round(size / MB / seconds, 1), "first_record_s": round(first, 3),
             "endpoint_cpu_s": round(tree_cpu_seconds(server) - cpu0, 3)}
    if flood:
        extra["flood_cpu_s"] = round(tree_cpu_seconds(flood) - flood0, 3)
    return Result(seconds, dig, bytes=size, records=n, extra=extra)


def flooded_case(conf: dict[str, str], topic: str, ends: dict[int, int], server: int, port: int,
                 ca: str, flood: int, pin: bool = False) -> Result:
    """The read while ``flood`` idle hostile connections are held (a process of their own, all of
    them opened once before the clock starts; stopped after the read)."""
    from tests.security.test_soak import hostile_main

    mp = multiprocessing.get_context("spawn")
    results = mp.Queue()
    opened = mp.Value("i", 0)
    mix = {kind: flood // len(FLOOD_MIX) for kind in FLOOD_MIX}
    proc = mp.Process(target=hostile_main, args=(port, ca, 900.0, results, opened, mix), daemon=True)
    proc.start()
    try:
        if pin and proc.pid is not None:
            pin_tree(proc.pid, {1})  # the attacker's process beside the consumer, not the endpoint
        give_up = time.monotonic() + 120
        while opened.value < sum(mix.values()):
            if time.monotonic() > give_up or not proc.is_alive():
                raise BenchFailure(f"the flood opened {opened.value} of {sum(mix.values())} connections")
            time.sleep(0.1)  # polling another process's counter: no event to wait on
        before = opened.value
        res = read_case(conf, topic, ends, server, proc.pid)
        res.extra["flood_reopened_during_read"] = opened.value - before
        return res
    finally:
        proc.terminate()
        proc.join(30)


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
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-endpoint-hostile.json")
    args = ap.parse_args()

    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from tests.security.conftest import PASSWORDS

    quiet_logs()
    rec = Recorder("endpoint-hostile", args)
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

        for mech in MECHANISMS:
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
        cases: dict[str, Any] = {"quiet": partial(read_case, reader, topic, ends, endpoint.pid)}
        for n in floods:
            cases[f"flooded-{n}"] = partial(flooded_case, reader, topic, ends, endpoint.pid, port, ca, n,
                                            args.pin)
        rows = run_rounds(cases, args.rounds, label="read under flood")
        rec.section("one consumer, tiered range, idle hostile connections or none", rows)
        for n in floods:
            rec.add(headline(rows, f"endpoint read rate with {n} idle hostile connections held, "
                             "against none", f"flooded-{n}", "quiet", 0.9))
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
