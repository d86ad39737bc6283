"""Consumer groups of many members through the endpoint, with real clients.

A standalone six-partition topic is tiered (no broker needed: the endpoint serves the remote
tier). Groups of confluent-kafka consumers (``subscribe``; eager and cooperative-sticky), Kafka's
own Java console consumers (from the jars) and ``kafka-consumer-groups --describe`` use it; a
member is killed with SIGKILL mid-read; and three endpoint processes behind one address list split
the groups between them (``read.kafka_peers``). Every record must be read exactly once across a
group (a killed member's uncommitted records excepted: those are read again from its last commit).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from kio.schema.errors import ErrorCode

from fetcher import RemoteFetcher
from rlm.log.partition import PartitionDir
from rlm.log.records import Record, iter_records
from rlm.types import KafkaUuid
from tests.daemon.helpers import wait_for
from tests.daemon.test_standalone import cfg_for, run_once, write_partition
from tests.kafka_endpoint._endpoint_process import EndpointProcess
from tests.kafka_endpoint.test_bad_input import _connect
from tests.kafka_endpoint.test_groups import _join
from tests.services.kafka import run_tool

pytestmark = pytest.mark.slow

TOPIC = "history"
PARTITIONS = 6
_GIVE_UP_S = 120

Key = tuple[int, int]  # partition, offset


@dataclass
class History:
    fetcher: RemoteFetcher
    expected: set[Key]
    work: Path
    endpoints: list[EndpointProcess] = field(default_factory=list)

    def endpoint(self, **settings: Any) -> EndpointProcess:
        """An endpoint process over the tiered topic (never a thread of this process: see
        :mod:`tests.kafka_endpoint._endpoint_process`)."""
        ep = EndpointProcess(self.work / "logs", self.work / "work",
                             self.work / f"endpoint-{uuid.uuid4().hex[:6]}", settings)
        self.endpoints.append(ep)
        return ep


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    tmp = tmp_path_factory.mktemp("groups")
    logs = tmp / "logs"
    tid = KafkaUuid.random()
    for p in range(PARTITIONS):
        write_partition(logs, TOPIC, p, 40, topic_id=tid)  # 600 tiered records each
    cfg = cfg_for(logs, tmp / "work")
    run_once(cfg)
    fetcher = RemoteFetcher.from_config(cfg)
    expected: set[Key] = set()
    for p in range(PARTITIONS):
        end = fetcher.plan(TOPIC, p).log_end
        for seg in PartitionDir(logs / f"{TOPIC}-{p}").inactive_segments():
            expected |= {(p, r.offset) for h, r in iter_records(seg.log_path)
                         if isinstance(r, Record) and not h.is_control and r.offset < end}
    h = History(fetcher, expected, tmp)
    try:
        yield h
    finally:
        for ep in h.endpoints:
            ep.close()
        fetcher.close()


class Member(threading.Thread):
    """A confluent-kafka group member: ``subscribe``, no auto commit, commits what it has read
    when partitions are revoked (and every ``commit_every`` records), records what it read."""

    def __init__(self, bootstrap: str, group: str, seen: collections.Counter[Key], done: threading.Event,
                 *, strategy: str = "range", commit_every: int = 50, delay_s: float = 0.0,
                 remote_assignor: str | None = None) -> None:
        """``remote_assignor``: a KIP-848 member (``group.protocol=consumer``; "" for the
        coordinator's default assignor), whose timeouts and assignor are the coordinator's."""
        super().__init__(daemon=True)
        self.conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted",
            "topic.metadata.refresh.interval.ms": 2000}
        if remote_assignor is None:
            self.conf.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                              "heartbeat.interval.ms": 500})
        else:
            self.conf["group.protocol"] = "consumer"
            if remote_assignor:
                self.conf["group.remote.assignor"] = remote_assignor
        self.seen, self.done = seen, done
        self.commit_every, self.delay_s = commit_every, delay_s
        self.read: list[Key] = []
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.events: list[tuple[bool, set[int]]] = []  # (assigned?, partitions), in order
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def owned(self) -> set[int]:
        """The partitions it holds now: its assignments and revocations replayed in order."""
        with self.lock:
            out: set[int] = set()
            for added, parts in self.events:
                out = out | parts if added else out - parts
            return out

    def run(self) -> None:
        try:
            c = Consumer(self.conf)

            def on_assign(cons: Any, parts: list[TopicPartition]) -> None:
                with self.lock:
                    self.assigned.append({tp.partition for tp in parts})
                    self.events.append((True, {tp.partition for tp in parts}))

            def on_revoke(cons: Any, parts: list[TopicPartition]) -> None:
                with contextlib.suppress(KafkaException):
                    cons.commit(asynchronous=False)  # still a member of this generation
                with self.lock:
                    self.revoked.append({tp.partition for tp in parts})
                    self.events.append((False, {tp.partition for tp in parts}))

            c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
            n = 0
            try:
                while not self.done.is_set():
                    for m in c.consume(20, timeout=0.2):
                        if m.error() is None:
                            key = (m.partition(), m.offset())
                            with self.lock:
                                self.seen[key] += 1
                                self.read.append(key)
                            n += 1
                            if n % self.commit_every == 0:
                                with contextlib.suppress(KafkaException):
                                    c.commit(asynchronous=False)
                    if self.delay_s:
                        time.sleep(self.delay_s)
            finally:
                c.close()
        except BaseException as e:
            self.error = e


def _wait_all(seen: collections.Counter[Key], want: set[Key], lock_owners: list[Member]) -> None:
    deadline = time.monotonic() + _GIVE_UP_S
    while time.monotonic() < deadline:
        if set(seen) >= want:
            return
        errors = [m.error for m in lock_owners if m.error is not None]
        assert not errors, errors
        time.sleep(0.2)
    raise AssertionError(f"{len(want - set(seen))} records never read, e.g. {sorted(want - set(seen))[:5]}")


def _wait_owned(members: list[Member], counts: list[int]) -> None:
    """Until the members own every partition, each partition once, ``counts[i]`` partitions
    the ``i``-th member (the group settled after a rebalance), however fast they read."""

    owned: list[set[int]] = []

    def settled() -> bool:
        errors = [m.error for m in members if m.error is not None]
        assert not errors, errors
        owned[:] = [m.owned() for m in members]
        every = sorted(p for parts in owned for p in parts)
        return every == list(range(PARTITIONS)) and [len(parts) for parts in owned] == counts

    try:
        wait_for(f"the group's members owning {counts} partitions", settled, timeout=_GIVE_UP_S)
    except AssertionError as e:
        raise AssertionError(f"{e}; they own {owned}, events {[m.events for m in members]}") from None


def _describe(bootstrap: str, group: str) -> list[list[str]]:
    res = run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                   bootstrap, "--describe", "--group", group, timeout=180)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rows = [line.split() for line in res.stdout.splitlines() if line.strip()]
    return [r for r in rows if r and r[0] == group]


def test_three_members_share_the_topic_exactly_once(history: History) -> None:
    ep = history.endpoint(group_initial_rebalance_delay_ms=1500)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    members = [Member(ep.bootstrap, "trio", seen, done, delay_s=0.05) for _ in range(3)]
    for m in members:
        m.start()
    try:
        _wait_all(seen, history.expected, members)
        # the group as the broker's tool shows it, while its members are alive
        rows = _describe(ep.bootstrap, "trio")
        assert sorted(int(r[2]) for r in rows) == list(range(PARTITIONS)), rows
        assert len({r[6] for r in rows}) == 3, rows  # CONSUMER-ID: three members
    finally:
        done.set()
        for m in members:
            m.join(30)
    assert set(seen) == history.expected
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:10]
    assert all(m.read for m in members), [len(m.read) for m in members]


def test_a_killed_member_s_partitions_move_from_its_last_commit(history: History, tmp_path: Path) -> None:
    ep = history.endpoint(group_initial_rebalance_delay_ms=1500)
    script = tmp_path / "member.py"
    script.write_text(_KILLED_MEMBER)
    proc = subprocess.Popen([sys.executable, str(script), ep.bootstrap, "fail"], stdout=subprocess.PIPE,
                            text=True)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    survivor = Member(ep.bootstrap, "fail", seen, done, commit_every=1, delay_s=0.05)
    survivor.start()
    victim: list[Key] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # the victim commits every record it prints, then is killed
            victim.append(tuple(json.loads(line)))  # type: ignore[arg-type]
            if len(victim) == 40:
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(30)
        victim += [tuple(json.loads(line)) for line in proc.stdout]  # type: ignore[misc]  # printed before
        for k in victim:
            seen[k] += 1
        _wait_all(seen, history.expected, [survivor])
    finally:
        done.set()
        survivor.join(30)
        if proc.poll() is None:
            proc.kill()
    twice = {k for k, n in seen.items() if n > 1}
    # at most the victim's last record per partition (printed, maybe not yet committed) again
    last = {p: max(o for q, o in victim if q == p) for p, _ in victim}
    assert twice <= {(p, o) for p, o in last.items()}, (sorted(twice)[:10], last)
    assert set(seen) == history.expected
    assert {p for p, _ in survivor.read} >= {p for p, _ in victim}, "the victim's partitions moved"


_KILLED_MEMBER = """
import json, sys
from confluent_kafka import Consumer
bootstrap, group = sys.argv[1:3]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
              "isolation.level": "read_uncommitted"})
c.subscribe(["history"])
while True:
    for m in c.consume(1, timeout=0.2):
        if m.error() is None:
            print(json.dumps([m.partition(), m.offset()]), flush=True)
            c.commit(message=m, asynchronous=False)
"""


def test_cooperative_sticky_moves_only_what_it_must(history: History) -> None:
    ep = history.endpoint(group_initial_rebalance_delay_ms=1000)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    first = [Member(ep.bootstrap, "coop", seen, done, strategy="cooperative-sticky", delay_s=0.2)
             for _ in range(2)]
    for m in first:
        m.start()
    try:
        _wait_owned(first, [3, 3])
        before = [m.owned() for m in first]
        late = Member(ep.bootstrap, "coop", seen, done, strategy="cooperative-sticky", delay_s=0.05)
        late.start()
        first.append(late)
        # the rebalance's end, not its first round: a cooperative member's first assignment after
        # it joins is empty (what moves is revoked first, assigned in a second round), and the
        # old members may have read every record by then
        _wait_owned(first, [2, 2, 2])
        _wait_all(seen, history.expected, first)
        # before the members stop: close() revokes everything, and the partitions of the first to
        # leave are assigned to those still polling
        revocations = [list(m.revoked) for m in first[:2]]
        moved = set().union(*late.assigned)
    finally:
        done.set()
        for m in first:
            m.join(30)
    assert len(moved) == 2, late.assigned  # six partitions, three members: two move
    for revs, owned in zip(revocations, before, strict=True):
        revoked = set().union(*revs) if revs else set()
        assert revoked <= moved, (revoked, moved)  # an old member gives up only what moves
        assert owned - revoked, "an old member kept partitions (no stop-the-world)"
    assert set(seen) == history.expected and max(seen.values()) == 1


def test_java_console_consumers_share_a_group(history: History) -> None:
    """Three instances of Kafka's console consumer with ``--group``: together, every record once."""
    ep = history.endpoint(group_initial_rebalance_delay_ms=8000)  # the JVMs join the first round
    procs = [subprocess.Popen(
        [*_java_cmd(), "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", ep.bootstrap,
         "--topic", TOPIC, "--group", "java-trio", "--timeout-ms", "20000",
         "--property", "print.partition=true", "--property", "print.offset=true",
         "--property", "print.value=false", "--consumer-property", "auto.offset.reset=earliest"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        outs.append((out, err))
    got: collections.Counter[Key] = collections.Counter()
    per_process = []
    for out, _err in outs:
        mine = 0
        for line in out.splitlines():  # Partition:P<TAB>Offset:O
            if not line.startswith("Partition:"):
                continue  # a tool's log line
            part, off = line.split("\t")[:2]
            got[(int(part.split(":")[1]), int(off.split(":")[1]))] += 1
            mine += 1
        per_process.append(mine)
    assert set(got) == history.expected, outs[0][1][-3000:]
    assert max(got.values()) == 1
    # the group was shared (a JVM that starts after the others read everything gets nothing left)
    assert sum(n > 0 for n in per_process) >= 2, per_process


def _java_cmd() -> list[str]:
    from tests.services.proc import ensure_jars, java

    return [java(), "-Xmx192m", "-Dlog4j2.level=WARN", "-cp", str(ensure_jars("kafka") / "*")]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_three_endpoints_behind_one_address_list(history: History) -> None:
    """Each group has one coordinator among the endpoint processes; clients given all three
    addresses read as one group; the others answer NOT_COORDINATOR for it."""
    ports = _free_ports(3)
    peers = tuple(f"127.0.0.1:{p}" for p in ports)
    eps = [history.endpoint(port=port, node_id=i, peers=peers, group_initial_rebalance_delay_ms=1500)
           for i, port in enumerate(ports)]
    bootstrap = ",".join(peers)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    members = [Member(bootstrap, "spread", seen, done, delay_s=0.05) for _ in range(3)]
    for m in members:
        m.start()
    try:
        _wait_all(seen, history.expected, members)
    finally:
        done.set()
        for m in members:
            m.join(30)
    assert set(seen) == history.expected and max(seen.values()) == 1
    owner = eps[0].coordinator_for("spread")
    assert eps[owner].has_classic_group("spread")
    for i, ep in enumerate(eps):
        if i != owner:
            assert not ep.has_classic_group("spread")
            with _connect(ep.port) as s:
                assert _join(s, 1, "spread").error_code == ErrorCode.not_coordinator
