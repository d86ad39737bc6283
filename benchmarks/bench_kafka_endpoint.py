"""Kafka-protocol endpoint vs the broker, same records, rounds interleaved (not a test).

Starts a real Kafka broker (KRaft, from the jars) and SeaweedFS, produces ``--size-mb`` of 1 KB
records into a 4-partition topic, tiers every rolled segment twice — into a local directory
(``local`` plugin) and into SeaweedFS (``s3`` plugin), each with a file metadata store — and
starts one ``rlm kafka-serve`` process per storage (merged mode off: every record comes from
remote storage). The broker keeps its local copy, so it can be read in the same run.

Each round reads the tiered range of every partition with confluent-kafka through each target —
``broker``, ``endpoint-local``, ``endpoint-s3`` — in turn, once with 1 consumer (all four
partitions) and once with 4 consumers (one partition each, at once). Timing stops when the last
record is in; then the records (partition, offset, key, value) are digested and must equal the
broker's digest of that round, or the benchmark fails. A warm-up round is not counted.

Printed: every round's MB/s and the CPU seconds the serving side spent (the broker's JVM, the
endpoint process, SeaweedFS: their whole process trees, from ``/proc``) and the consumers' (this
process: confluent-kafka's threads and the digesting loop), and per target the
median of the per-round ratios to the broker of the same round. Raw results go to
``docs/data/bench-kafka-endpoint.json`` (commit, date, machine, every round) unless ``--no-save``.

With ``--security sasl_ssl`` the broker's only listener is SASL_SSL with ACLs (the security
suite's broker), the endpoints serve TLS and relay each consumer's SCRAM login to it, and every
consumer of every target logs in as the same reader: the cost of TLS + SASL on both sides.

    .venv/bin/python benchmarks/bench_kafka_endpoint.py --size-mb 256 --rounds 3
    .venv/bin/python benchmarks/bench_kafka_endpoint.py --size-mb 256 --rounds 3 --security sasl_ssl

``--pin`` runs the serving side (the broker's JVM, each endpoint and SeaweedFS: every thread of
their process trees) on CPU 0 and the consumers (this process) on CPU 1, as when the clients run on
other machines: on a 2-core machine the unpinned rounds make the consumers and the server share
both cores, so their rate follows the total CPU per byte (where the broker's sendfile wins) rather
than what each server delivers to a client. Pinned results go to ``bench-kafka-endpoint-pinned*.json``.

``--py-spy DIR`` also records a py-spy profile (speedscope JSON) of each endpoint process over all
rounds, to see where the endpoint's CPU goes.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import git_commit, machine  # noqa: E402

MB = 1 << 20
PARTITIONS = 4
VALUE = 1000
Read = tuple[int, int, float, str, float]  # records, bytes, seconds, digest, first record's seconds


def record_value(i: int) -> bytes:
    """Record ``i``'s value: distinct content per record (repeated digits, so it compresses)."""
    return (b"%012d" % i) * (VALUE // 12) + b"x" * (VALUE % 12)


def produce(bs: str, topic: str, total_bytes: int, client: dict[str, str]) -> None:
    from confluent_kafka import Producer

    p = Producer({**client, "bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1 << 20, "acks": 1,
                  "queue.buffering.max.kbytes": 1 << 20})
    n = total_bytes // VALUE
    for i in range(n):
        value = record_value(i)
        while True:
            try:
                p.produce(topic, key=b"%012d" % i, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def consume(conf: dict[str, str], topic: str, partitions: list[int], ends: dict[int, int]) -> tuple[
        dict[int, list[Any]], int, float, float]:
    """Every record of ``partitions`` from 0 below ``ends``: (messages by partition, bytes, seconds,
    seconds until the first record: the cold start of a read, included in the total)."""
    from confluent_kafka import Consumer, TopicPartition

    bs = conf["bootstrap.servers"]
    # fetch.queue.backoff.ms: librdkafka waits 1 s (its default) before fetching again once the
    # consumer's queue is over queued.max.messages.kbytes; a round that hit it by chance took ~1 s
    # longer, which made every target's one-consumer rate bimodal (about 150 or 340 MB/s)
    c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 * MB,
                  "max.partition.fetch.bytes": 8 * MB, "queued.max.messages.kbytes": 256 * 1024,
                  "fetch.queue.backoff.ms": 10})
    tps = [TopicPartition(topic, p, 0) for p in partitions]
    c.assign(tps)
    batches: list[list[Any]] = []
    remaining = sum(ends[p] for p in partitions)
    t0 = time.perf_counter()
    deadline = time.monotonic() + 600
    first = 0.0
    # per batch, not per record: the consumers share this process's one pinned core, and a Python
    # loop over every record (a quarter million) made them, not the server, what bounded a round
    while remaining > 0 and time.monotonic() < deadline:
        # ask for no more than what is still missing: consume() waits its whole timeout for a
        # batch it cannot fill, which at the end of the tiered range (the endpoint's log end;
        # the broker has more records after it) would charge the endpoint a second per round
        batch = c.consume(num_messages=max(1, min(10000, remaining)), timeout=1.0)
        if not batch:
            continue
        if not batches:
            first = time.perf_counter() - t0
        batches.append(batch)
        # the application's position (next offset per partition) says what is still missing
        before, remaining = remaining, sum(
            max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in c.position(tps))
        if remaining == before:
            _raise_errors(bs, batch)
    seconds = time.perf_counter() - t0
    c.close()
    got: dict[int, list[Any]] = {p: [] for p in partitions}
    for batch in batches:
        _raise_errors(bs, batch)
        for m in batch:
            if m.offset() < ends[m.partition()]:
                got[m.partition()].append(m)
    todo = [p for p in partitions if ends[p] > 0 and (not got[p] or got[p][-1].offset() != ends[p] - 1)]
    if todo:
        raise RuntimeError(f"{bs}: partitions {todo} did not reach their end in 600 s")
    size = sum(len(m.value() or b"") + len(m.key() or b"") for ms in got.values() for m in ms)
    return got, size, seconds, first


def _raise_errors(bootstrap: str, batch: list[Any]) -> None:
    for m in batch:
        if m.error() is not None:
            raise RuntimeError(f"consumer error from {bootstrap}: {m.error()}")


def bytes_read(pid: int) -> int:
    """Bytes ``pid`` has read through read syscalls (``rchar``): for the ``local`` plugin's endpoint,
    what it read from storage, so a round that reads a segment twice shows. Socket receives
    (``recv_into``, how the ``s3`` plugin reads its GETs) are not counted by ``rchar``: for
    ``endpoint-s3`` this is 0 even when every byte came from SeaweedFS (whose CPU, in the split,
    shows it served them)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (a service's wrapper and its
    JVM), from ``/proc``: what the serving side of a case cost, beside the rate it reached."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d.name))
        cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo.extend(children.get(p, ()))
    return total


def pin_tree(pid: int, cpus: set[int], descendants: bool = True) -> int:
    """Pin every thread of ``pid`` (and of its live descendants) to ``cpus``; threads they start
    later inherit it. Returns how many threads were pinned."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d.name))
    pinned, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if descendants:
            todo.extend(children.get(p, ()))
        try:
            tids = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
                pinned += 1
            except OSError:  # the thread ended meanwhile
                pass
    return pinned


def digest(messages: dict[int, list[Any]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(messages):
        for m in messages[p]:
            h.update(b"%d:%d:" % (p, m.offset()))
            h.update(m.key() or b"")
            h.update(m.value() or b"")
    return h.hexdigest()


def one_round(conf: dict[str, str], topic: str, ends: dict[int, int], consumers: int) -> Read:
    """One target's read; Python's cyclic GC is off meanwhile: the quarter million messages kept
    for the digest would otherwise be re-scanned by every collection, an O(n^2) cost of this
    client, not of the server, that made the consumers' CPU per round vary by half."""
    gc.collect()
    gc.disable()
    try:
        return _one_round(conf, topic, ends, consumers)
    finally:
        gc.enable()


def _one_round(conf: dict[str, str], topic: str, ends: dict[int, int], consumers: int) -> Read:
    if consumers == 1:
        msgs, size, seconds, first = consume(conf, topic, list(range(PARTITIONS)), ends)
        return sum(len(v) for v in msgs.values()), size, seconds, digest(msgs), first
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def worker(p: int) -> None:
        try:
            results[p] = consume(conf, topic, [p], ends)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(PARTITIONS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    msgs = {p: r[0][p] for p, r in results.items()}
    return (sum(len(v) for v in msgs.values()), sum(r[1] for r in results.values()), wall, digest(msgs),
            max(r[3] for r in results.values()))


def serve(tmp: Path, name: str, conf: dict[str, Any],
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(conf))
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    # run from the temporary directory: ``python -m`` puts its working directory first on sys.path,
    # ahead of PYTHONPATH, so started from a checkout it would import that checkout whatever a
    # variant's PYTHONPATH says (every ``--variant old:PYTHONPATH=...`` A/B before this was fixed
    # compared the working tree with itself)
    where = subprocess.run([sys.executable, "-c", "import fetcher; print(fetcher.__file__)"], cwd=tmp,
                           env=full_env, capture_output=True, text=True, check=True).stdout.strip()
    print(f"{name}: serves code from {Path(where).parent.parent}", flush=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "kafka-serve", "--config", str(tmp / f"{name}.yaml"),
         "--listener", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True, env=full_env, cwd=tmp)
    assert proc.stdout is not None
    line = next(ln for ln in proc.stdout if ln.startswith("kafka endpoint listening on "))
    return proc, line.split()[-1]


def secure_cluster(tmp: Path) -> Any:
    """The security suite's broker: SASL_SSL only (PEM keystore, PLAIN + SCRAM), StandardAuthorizer."""
    from tests.security.certs import issue, make_ca
    from tests.security.conftest import PASSWORDS, SaslSslCluster
    from tests.services.kafka import SaslScram

    ca = make_ca(tmp / "pki")
    cluster = SaslSslCluster(nodes=1, name="bench-endpoint-sasl", heap="1g",
                             sasl=SaslScram(users=tuple(PASSWORDS.items()), mechanism="SCRAM-SHA-512"))
    cluster.ca = ca
    cluster.keystore = issue(ca, tmp / "pki" / "broker.pem", "broker")
    cluster.endpoint_keystore = issue(  # type: ignore[attr-defined]
        ca, tmp / "pki" / "endpoint.pem", "endpoint")
    return cluster.start()


def create_secure_topic(cluster: Any, topic: str, segment: int) -> None:
    """The topic, bob's READ ACLs on it and on every group, and SCRAM credentials for the users."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from tests.security.conftest import PASSWORDS

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **cluster.client_config})
    new = NewTopic(topic, PARTITIONS, 1, config={"segment.bytes": str(segment)})
    admin.create_topics([new])[topic].result(60)
    acls = [AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                       AclPermissionType.ALLOW) for rtype, name in ((ResourceType.TOPIC, topic),
                                                                     (ResourceType.GROUP, "*"))]
    for f in admin.create_acls(acls).values():
        f.result(30)
    sha = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(u, sha, p.encode()) for u, p in PASSWORDS.items()]).values():
        f.result(30)


def reader_conf(cluster: Any) -> dict[str, str]:
    from tests.security.conftest import client_conf

    return client_conf("bob", cluster)


def _case_line(name: str, v: dict[str, Any]) -> str:
    """One target's rate and CPU in a round; the serving side split per process (endpoint +
    SeaweedFS) when it has several; the bytes an endpoint read by read syscalls (files only:
    see :func:`bytes_read`)."""
    parts = v["server_cpu_parts_s"]
    split = f" = {' + '.join(f'{x:.2f}' for x in parts)}" if len(parts) > 1 else ""
    read = f", file reads {v['server_read_mb']:.0f} MB" if name != "broker" else ""
    return (f"{name} {v['mb_per_s']:.1f} MB/s (first record {1000 * v['first_record_s']:.0f} ms; "
            f"CPU s: server {v['server_cpu_s']:.2f}{split}, "
            f"consumers {v['client_cpu_s']:.2f}{read})")


def _sections(rounds: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """benchlib's layout of the raw rounds: one list per consumer count, ``cases`` per target."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rounds:
        out.setdefault(f"{r['consumers']} consumer(s)", []).append(
            {"round": r["round"] - 1, "warmup": r["warmup"], "load_avg": r["load_avg"],
             "cases": r["targets"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3, help="counted rounds (after one warm-up)")
    ap.add_argument("--storage", choices=("local", "s3", "both"), default="both")
    ap.add_argument("--security", choices=("plaintext", "sasl_ssl"), default="plaintext",
                    help="sasl_ssl: the broker's only listener is SASL_SSL with ACLs, the endpoint relays "
                    "SCRAM logins to it and serves TLS; every consumer logs in as a reader with READ ACLs")
    ap.add_argument("--no-save", action="store_true", help="write no docs/data/bench-kafka-endpoint*.json")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                    help="also serve each storage from an endpoint with these environment overrides "
                    "(e.g. noseq:RLM_READ__KAFKA_SEQUENTIAL_READS=false): an A/B of a setting in one run")
    ap.add_argument("--pin", action="store_true",
                    help="serving side on CPU 0, consumers on CPU 1 (clients on other machines)")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record a py-spy profile of each endpoint process into DIR")
    args = ap.parse_args()

    from rlm.config import load_config
    from rlm.daemon.service import Daemon
    from tests.daemon.helpers import create_topic, s3_storage
    from tests.services.kafka import KafkaCluster
    from tests.services.s3 import SeaweedFS

    tmp = Path(tempfile.mkdtemp(prefix="bench-endpoint-"))
    secure = args.security == "sasl_ssl"
    cluster = (secure_cluster(tmp) if secure
               else KafkaCluster(nodes=1, name="bench-endpoint", heap="1g").start())
    weed = SeaweedFS(name="bench-endpoint").start() if args.storage in ("s3", "both") else None
    procs: list[subprocess.Popen[str]] = []
    spies: list[subprocess.Popen[bytes]] = []
    try:
        bs = cluster.bootstrap
        topic = "bench"
        total = args.size_mb * MB
        segment = min(max(total // PARTITIONS // 5, MB), 256 * MB)  # ~5 segments a partition
        admin_conf = cluster.client_config if secure else {}
        if secure:
            create_secure_topic(cluster, topic, segment)
        else:
            create_topic(bs, topic, partitions=PARTITIONS, **{"segment.bytes": str(segment)})
        t0 = time.perf_counter()
        produce(bs, topic, total, admin_conf)
        print(f"produced {args.size_mb} MB in {time.perf_counter() - t0:.1f} s", flush=True)

        storages: dict[str, dict[str, Any]] = {}
        if args.storage in ("local", "both"):
            storages["local"] = {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}}
        if weed is not None:
            storages["s3"] = s3_storage(weed, weed.create_bucket("bench"))
        reader = reader_conf(cluster) if secure else {}
        targets: dict[str, dict[str, str]] = {"broker": {"bootstrap.servers": bs, **reader}}
        server_pids: dict[str, list[int]] = {"broker": [n.proc.pid for n in cluster._nodes if n.proc]}
        ends: dict[int, int] | None = None
        for name, storage in storages.items():
            conf: dict[str, Any] = {
                "log_dirs": [str(cluster.log_dir)], "work_dir": str(tmp / f"daemon-{name}"),
                "bootstrap_servers": bs, "storage": storage,
                "metadata": {"manager": "file", "config": {"dir": str(tmp / f"metadata-{name}")}},
                "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1}],
                "http": {"enabled": False}, "log_level": "warning",
                **({"kafka_client": admin_conf} if secure else {}),
            }
            t0 = time.perf_counter()
            d = Daemon(load_config(None, **conf), once=True).start()
            assert d.run_once() == 0
            d.stop()
            print(f"tiered to {name} in {time.perf_counter() - t0:.1f} s", flush=True)
            serving = {k: v for k, v in conf.items() if k not in ("log_dirs", "topics")}
            serving.update(work_dir=str(tmp / f"serve-{name}"), read={"kafka_merged": False})
            if secure:
                serving["read"]["kafka_security"] = {
                    "security.protocol": "SASL_SSL", "ssl.keystore.location": str(cluster.endpoint_keystore)}
            variants: list[tuple[str, dict[str, str]]] = [("", {})]
            for v in args.variant:
                suffix_v, _, assignments = v.partition(":")
                variants.append((suffix_v, dict(kv.split("=", 1) for kv in assignments.split(","))))
            for suffix, env in variants:
                label = f"endpoint-{name}" + (f"-{suffix}" if suffix else "")
                serving_v = {**serving, "work_dir": str(tmp / f"serve-{name}{suffix}")}
                proc, address = serve(tmp, label, serving_v, env)
                procs.append(proc)
                targets[label] = {"bootstrap.servers": address, **reader}
                server_pids[label] = [proc.pid] + (
                    [weed.proc.pid] if name == "s3" and weed is not None and weed.proc else [])
            from fetcher import RemoteFetcher

            with RemoteFetcher.from_config(load_config(None, **serving)) as f:
                got = {p: f.plan(topic, p).log_end for p in range(PARTITIONS)}
            ends = got if ends is None else {p: min(ends[p], got[p]) for p in got}
        assert ends is not None and all(e > 0 for e in ends.values()), ends
        print(f"tiered range per partition: {ends}", flush=True)
        if args.py_spy is not None:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            for name, pids in server_pids.items():
                if name != "broker":
                    spies.append(subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "-r", "50",
                         "-f", "speedscope", "-o", str(args.py_spy / f"{name}.json"), "-p", str(pids[0])],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        if args.pin:
            if len(os.sched_getaffinity(0)) < 2:
                raise SystemExit("--pin needs 2 CPUs")
            served = sum(pin_tree(pid, {0}) for pids in server_pids.values() for pid in pids)
            own = pin_tree(os.getpid(), {1}, descendants=False)  # the servers are its children
            print(f"pinned: {served} serving threads to CPU 0, {own} of this process to CPU 1", flush=True)
        rounds: list[dict[str, Any]] = []
        for r in range(args.rounds + 1):
            for consumers in (1, 4):
                row: dict[str, Any] = {"round": r, "warmup": r == 0, "consumers": consumers,
                                       "load_avg": os.getloadavg()[0], "targets": {}}
                # interleaved, and each round starts one case further on (broker, endpoint-local,
                # endpoint-s3, then endpoint-local, endpoint-s3, broker...), so that no case
                # keeps one place: in two code A/Bs on 2026-11-27 with a fixed order, the endpoint
                # run right after the broker measured lower with one consumer in both
                names = list(targets)
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:
                    client = targets[name]
                    cpu0 = [tree_cpu_seconds(pid) for pid in server_pids[name]]
                    read0 = bytes_read(server_pids[name][0])
                    mine0 = time.process_time()
                    n, size, seconds, dig, first = one_round(client, topic, ends, consumers)
                    parts = [tree_cpu_seconds(pid) - c0
                             for pid, c0 in zip(server_pids[name], cpu0, strict=True)]
                    mine = time.process_time() - mine0
                    row["targets"][name] = {"records": n, "bytes": size, "seconds": seconds, "digest": dig,
                                            "mb_per_s": size / MB / seconds,
                                            "first_record_s": round(first, 3),
                                            "server_cpu_s": round(sum(parts), 3),
                                            "server_cpu_parts_s": [round(x, 3) for x in parts],
                                            "server_read_mb": round(
                                                (bytes_read(server_pids[name][0]) - read0) / MB, 1),
                                            "client_cpu_s": round(mine, 3)}
                want = row["targets"]["broker"]["digest"]
                bad = {k: v["digest"] for k, v in row["targets"].items() if v["digest"] != want}
                if bad:
                    raise SystemExit(f"round {r}, {consumers} consumer(s): answers differ from the broker's "
                                     f"{want}: {bad}")
                rounds.append(row)
                print(f"round {r}{' (warm-up)' if r == 0 else ''} {consumers} consumer(s): "
                      + "  ".join(_case_line(k, v) for k, v in row["targets"].items()), flush=True)

        summary: dict[str, dict[str, float]] = {}
        headlines: list[dict[str, Any]] = []
        print("\nmedian of per-round ratios to the broker (goal >= 1.0):")
        for consumers in (1, 4):
            counted = [r for r in rounds if not r["warmup"] and r["consumers"] == consumers]
            for name in targets:
                if name == "broker":
                    continue
                ratios = [r["targets"][name]["mb_per_s"] / r["targets"]["broker"]["mb_per_s"]
                          for r in counted]
                med = statistics.median(ratios)
                summary.setdefault(name, {})[f"{consumers} consumer(s)"] = med
                headlines.append({"what": f"Kafka endpoint, {consumers} consumer(s), {args.security}"
                                  + (", pinned (server CPU 0, consumers CPU 1)" if args.pin else ""),
                                  "ours": name, "alternative": "broker", "ratio": round(med, 3),
                                  "ratio_rounds": [round(x, 3) for x in ratios], "goal": 1.0,
                                  "goal_text": ">= 1x", "met": med >= 1.0})
                print(f"  {name:15s} {consumers} consumer(s): {med:.2f}x  (rounds: "
                      f"{', '.join(f'{x:.2f}' for x in ratios)})  {'met' if med >= 1.0 else 'NOT met'}")
        if not args.no_save:
            out = ROOT / "docs" / "data" / ("bench-kafka-endpoint" + ("-pinned" if args.pin else "")
                                             + ("-sasl-ssl" if secure else "") + ".json")
            out.write_text(json.dumps({
                "benchmark": "bench_kafka_endpoint", "commit": git_commit(),
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": {**machine(), "load_avg_rounds": [min(r["load_avg"] for r in rounds),
                                                             max(r["load_avg"] for r in rounds)]},
                "size_mb": args.size_mb, "partitions": PARTITIONS, "ends": ends, "security": args.security,
                "pinned": args.pin,
                # what the run was given, as performance.md prints it: a variant (cached, a setting)
                # is a target of its own and must say what it changed
                "args": {"size_mb": args.size_mb, "rounds": args.rounds, "storage": args.storage,
                         "security": args.security, "pin": args.pin,
                         "variant": " --variant ".join(args.variant) or None},
                "median_ratio_to_broker": summary, "headlines": headlines,
                "rounds": _sections(rounds),
            }, indent=1) + "\n")
            print(f"raw results: {out.relative_to(ROOT)}")
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.stop()
        if weed is not None:
            weed.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
