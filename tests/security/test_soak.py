"""Soak: 500 hostile connections of mixed kinds for :data:`SOAK_S` while three real consumers read.

The hostile side runs in a process of its own (so it does not share the endpoint's GIL), from
loopback addresses other than the consumers' (127.0.0.2 up: an attacker is somewhere else; per
address limits and failed-login limits then protect the consumers as they would in production,
instead of locking out 127.0.0.1). Every hostile connection that ends is opened again after
:data:`REOPEN_S` until the soak is over:

- ``idle``: a TCP connection that never says anything (not even a TLS ClientHello);
- ``tls_unfinished``: the first bytes of a TLS ClientHello, never the rest;
- ``tls_idle``: a finished TLS handshake, then silence;
- ``prefix_only``: a TLS session that sends a 4-byte size prefix and never the request;
- ``api_versions``: a TLS session that sends ApiVersions over and over without logging in;
- ``wrong_password``: PLAIN logins with wrong passwords (unknown users and carol, never a consumer's);
- ``garbage``: random bytes instead of a TLS handshake.

Meanwhile, through the same endpoint, Kafka's Java console consumer (bob, topic B),
confluent-kafka (bob, topic A) and kafka-python (alice, topic A) each read the whole tiered
history again and again until the soak is over (new connections and logins while the flood is on):
every read must equal what the broker served before the range was deleted. The test process's
resident memory (the endpoint runs in a thread of it) may grow by at most :data:`RSS_GROWTH_MIB`,
and once the hostile process is gone the endpoint's connections fall back to the consumers' own.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import os
import random
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fetcher.kafka import EndpointThread
from tests.daemon.helpers import wait_for
from tests.security.conftest import PASSWORDS, Secured, own_endpoint, read_range
from tests.services.kafka import run_tool

pytestmark = [pytest.mark.security, pytest.mark.kafka, pytest.mark.slow]

SOAK_S = 60.0  # how long the hostile connections are held and the consumers read
HOSTILE = {  # kind -> connections held at once: 500 in all, 310 of them past the TLS handshake
    "idle": 60,
    "tls_unfinished": 60,
    "tls_idle": 120,
    "prefix_only": 140,
    "api_versions": 50,
    "wrong_password": 40,
    "garbage": 30,
}
SOURCES = [f"127.0.0.{i}" for i in range(2, 42)]  # hostile source addresses (40)
REOPEN_S = 0.5  # the attacker's pace: a connection that ended is opened again after this
CONNECT_S = 10.0  # a hostile connect or TLS handshake given up after this (it counts as refused)
RSS_GROWTH_MIB = 300
READ_GIVE_UP_S = 240  # only so a broken endpoint fails a consumer instead of hanging the test


# ---- the hostile process ------------------------------------------------------------------------
def _api_versions_frame(corr: int) -> bytes:
    from tests.security.frames import api_versions, frame

    return frame(18, 3, corr, api_versions())


def _plain_frames(user: str, password: str) -> tuple[bytes, bytes]:
    from kio.index import load_request_schema

    from tests.security.frames import frame

    handshake: Any = load_request_schema(17, 1)
    authenticate: Any = load_request_schema(36, 2)
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return frame(17, 1, 1, handshake(mechanism="PLAIN")), frame(36, 2, 2, authenticate(auth_bytes=token))


_CLIENT_HELLO_START = bytes.fromhex("160301020001000200fc0303") + os.urandom(20)  # a record of 512, cut off


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def _connection(
    kind: str, n: int, port: int, ctx: ssl.SSLContext, until: float, stats: Any, opened: Any
) -> None:
    """One hostile connection of ``kind`` from its source address, held until ``until`` or until
    the server closes it."""
    src = SOURCES[n % len(SOURCES)]
    tls = kind in ("tls_idle", "prefix_only", "api_versions", "wrong_password")
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1",
            port,
            ssl=ctx if tls else None,
            server_hostname="127.0.0.1" if tls else None,
            local_addr=(src, 0),
        ),
        CONNECT_S,
    )
    stats[f"{kind}:opened"] += 1
    with opened.get_lock():
        opened.value += 1
    try:
        left = until - time.monotonic()
        if kind == "tls_unfinished":
            writer.write(_CLIENT_HELLO_START)
        elif kind == "garbage":
            writer.write(random.randbytes(random.randint(1, 4096)))
        elif kind == "prefix_only":
            writer.write(struct.pack(">i", 200))
        elif kind == "api_versions":
            corr = 0
            while time.monotonic() < until:
                corr += 1
                writer.write(_api_versions_frame(corr))
                await asyncio.wait_for(_read_frame(reader), max(until - time.monotonic(), 0.1))
                stats["api_versions:answered"] += 1
            return
        elif kind == "wrong_password":
            user = random.choice(("carol", f"mallory-{n}"))
            hs, auth = _plain_frames(user, f"wrong-{uuid.uuid4().hex[:8]}")
            writer.write(hs)
            await asyncio.wait_for(_read_frame(reader), left)
            writer.write(auth)
            await asyncio.wait_for(_read_frame(reader), max(until - time.monotonic(), 0.1))
            stats["wrong_password:refused"] += 1
        await writer.drain()
        # held: until the server closes it or the soak is over
        await asyncio.wait_for(reader.read(), max(until - time.monotonic(), 0.1))
        stats[f"{kind}:closed_by_server"] += 1
    finally:
        writer.close()


async def _keep(
    kind: str, n: int, port: int, ctx: ssl.SSLContext, until: float, stats: Any, opened: Any
) -> None:
    while time.monotonic() < until:
        try:
            await _connection(kind, n, port, ctx, until, stats, opened)
        except TimeoutError:
            if time.monotonic() < until:
                stats[f"{kind}:timed_out"] += 1  # connect or handshake not answered in CONNECT_S
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError):
            stats[f"{kind}:refused_or_reset"] += 1
        if time.monotonic() < until:
            await asyncio.sleep(REOPEN_S)  # the attacker's pace, not a wait for a condition


async def _flood(port: int, ca: str, seconds: float, opened: Any, mix: dict[str, int]) -> dict[str, int]:
    ctx = ssl.create_default_context(cafile=ca)
    until = time.monotonic() + seconds
    stats: collections.Counter[str] = collections.Counter()
    tasks = [
        asyncio.create_task(_keep(kind, n, port, ctx, until, stats, opened))
        for kind, count in mix.items()
        for n in range(count)
    ]
    await asyncio.gather(*tasks)
    return dict(stats)


def hostile_main(
    port: int, ca: str, seconds: float, results: Any, opened: Any, mix: dict[str, int] | None = None
) -> None:
    """The hostile process: ``mix`` (default :data:`HOSTILE`) connections for ``seconds``; puts its
    counts into ``results``; ``opened`` counts the connections it opened as it goes. Also the
    flood of ``benchmarks/bench_endpoint_hostile.py``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    results.put(asyncio.run(_flood(port, ca, seconds, opened, HOSTILE if mix is None else mix)))


# ---- the consumers ------------------------------------------------------------------------------
def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _java_reads(t: Secured, bootstrap: str, props: Path, run: int) -> list[tuple[int, bytes]]:
    want = len(t.before["B"])
    res = run_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", bootstrap, "--consumer.config", str(props), "--topic", t.topics["B"],
        "--group", f"bob-soak-{run}-{uuid.uuid4().hex[:6]}", "--from-beginning",
        "--max-messages", str(want), "--timeout-ms", "120000",
        "--property", "print.key=true", "--property", "print.offset=true", "--property", "print.value=false",
        timeout=READ_GIVE_UP_S,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    got = []
    for line in res.stdout.splitlines():  # Offset:O<TAB>key
        off, key = line.split("\t")
        got.append((int(off.split(":")[1]), key.encode()))
    return got


def _kafka_python_reads(t: Secured, bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    last = t.before["A"][-1][0]
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        ssl_cafile=str(t.ca.path),
        group_id=None,
        enable_auto_commit=False,
    )
    try:
        tp = KTP(t.topics["A"], 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[tuple[int, bytes, bytes]] = []
        give_up = time.monotonic() + READ_GIVE_UP_S
        while (not got or got[-1][0] < last) and time.monotonic() < give_up:
            for recs in c.poll(timeout_ms=1000).values():
                got += [(r.offset, r.key, r.value) for r in recs if r.offset <= last]
    finally:
        c.close()
    return got


@pytest.fixture(scope="module")
def soaked(secured: Secured) -> Iterator[tuple[Secured, EndpointThread]]:
    """An endpoint of its own (default limits), so the flood's failed logins and connections
    leave the suite's shared endpoint alone."""
    with own_endpoint(secured, "soak") as soaked:
        yield secured, soaked.endpoint


def test_three_consumers_read_everything_under_500_hostile_connections(
    soaked: tuple[Secured, EndpointThread],
) -> None:
    t, endpoint = soaked
    bootstrap = endpoint.bootstrap
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": PASSWORDS["bob"],
        "ssl.ca.location": str(t.ca.path),
    }
    a, b = t.topics["A"], t.topics["B"]
    want_a = t.before["A"]
    want_b_keys = [(o, k) for o, k, _ in t.before["B"]]
    assert read_range(conf, a, t.remote_end["A"]) == want_a  # warm: caches and pools filled first
    rss_before = _rss_mib()

    props = t.tmp / "soak-bob.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{PASSWORDS["bob"]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={t.ca.path}\n"
    )
    mp = multiprocessing.get_context("spawn")
    results = mp.Queue()
    opened = mp.Value("i", 0)
    hostile = mp.Process(target=hostile_main, args=(endpoint.port, str(t.ca.path), SOAK_S, results, opened))
    reads: dict[str, int] = collections.Counter()
    failures: list[str] = []
    try:
        hostile.start()
        # the consumers start once the flood is on (every hostile connection opened once)
        wait_for(
            "the flood to open its connections", lambda: opened.value >= sum(HOSTILE.values()), timeout=90
        )
        print(f"soak: flood on, endpoint holds {endpoint.endpoint.connections} connection(s) past TLS")
        until = time.monotonic() + SOAK_S

        def loop(name: str, one_read: Callable[[int], bool]) -> None:
            run = 0
            try:
                while run == 0 or time.monotonic() < until:  # at least one read, then until the end
                    if not one_read(run):
                        failures.append(f"{name}: read {run} differs from what the broker served")
                        return
                    run += 1
                    reads[name] += 1
            except BaseException as e:
                failures.append(f"{name}: read {run} failed: {e!r}"[:2000])

        consumers = {
            "java": lambda run: _java_reads(t, bootstrap, props, run) == want_b_keys,
            "confluent-kafka": lambda run: (
                read_range(conf, a if run % 2 else b, t.remote_end["A" if run % 2 else "B"])
                == (want_a if run % 2 else t.before["B"])
            ),
            "kafka-python": lambda run: _kafka_python_reads(t, bootstrap) == want_a,
        }
        threads = [threading.Thread(target=loop, args=kv, name=f"soak-{kv[0]}") for kv in consumers.items()]
        for th in threads:
            th.start()
        for th in threads:
            th.join(SOAK_S + 2 * READ_GIVE_UP_S)
        assert not any(th.is_alive() for th in threads), "a consumer did not finish"
        hostile.join(SOAK_S + 60)
        assert hostile.exitcode == 0, f"the hostile process ended with {hostile.exitcode}"
        stats = results.get(timeout=10)
    finally:
        props.unlink(missing_ok=True)  # it holds a password: not left for the file scan
        if hostile.is_alive():
            hostile.terminate()
            hostile.join(10)
    print(f"soak: consumer reads {dict(reads)}; hostile {dict(sorted(stats.items()))}")
    assert not failures, failures
    assert all(reads[name] >= 1 for name in consumers)
    assert sum(v for k, v in stats.items() if k.endswith(":opened")) >= sum(HOSTILE.values())
    # the hostile process is gone: its connections are closed, none kept by the endpoint
    wait_for("hostile connections released", lambda: endpoint.endpoint.connections <= 3, timeout=30)
    growth = _rss_mib() - rss_before
    print(f"soak: RSS {rss_before:.0f} MiB before the flood, grew by {growth:.0f} MiB")
    assert growth < RSS_GROWTH_MIB, f"the endpoint's process grew by {growth:.0f} MiB"
    # and a new login is served at once afterwards
    assert read_range(conf, b, t.remote_end["B"]) == t.before["B"]
