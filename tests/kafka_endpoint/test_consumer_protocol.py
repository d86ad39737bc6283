"""KIP-848 consumer groups (``group.protocol=consumer``) through the endpoint, with real clients.

The same standalone six-partition tiered topic as the classic-group tests. librdkafka
(confluent-kafka) and Kafka's own Java console consumer join with ConsumerGroupHeartbeat; the
endpoint computes the assignment (server-side ``uniform``/``range``) and reconciles members one
heartbeat at a time. Every record must be read exactly once across a group: with members joining
late (partitions move only after their owner revoked them), and with a member killed (its
partitions move after the session timeout, from its last commit).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.helpers import wait_for
from tests.kafka_endpoint import test_consumer_groups as classic
from tests.kafka_endpoint.test_consumer_groups import (
    PARTITIONS,
    TOPIC,
    History,
    Key,
    Member,
    _java_cmd,
    _wait_all,
)

history = classic.history  # the same tiered topic (a module fixture: built once for this module)

pytestmark = pytest.mark.slow


def _members(ep: Any, group: str) -> int:
    """How many members ``group`` has on the endpoint now (0 when it is gone)."""
    g = ep.consumer_group(group)
    return int(g[1]) if g is not None else 0


def _endpoint(history: History) -> Any:
    return history.endpoint(consumer_heartbeat_interval_ms=300, consumer_session_timeout_ms=4000)


@pytest.mark.parametrize("assignor", [None, "range"])
def test_members_join_late_and_every_record_is_read_once(history: History, assignor: str | None) -> None:
    ep = _endpoint(history)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    members = [Member(ep.bootstrap, f"kip848-{assignor}", seen, done, commit_every=20, delay_s=0.05,
                      remote_assignor=assignor or "")]
    members[0].start()
    try:
        deadline = time.monotonic() + 60
        while not members[0].read and time.monotonic() < deadline:
            time.sleep(0.1)
        assert members[0].read, members[0].error
        for _ in range(2):  # two more join while the first reads: partitions move one heartbeat at a time
            members.append(Member(ep.bootstrap, f"kip848-{assignor}", seen, done, commit_every=20,
                                  delay_s=0.05, remote_assignor=assignor or ""))
            members[-1].start()
        _wait_all(seen, history.expected, members)
        deadline = time.monotonic() + 30  # the three settle on two partitions each
        while sorted(len(m.owned()) for m in members) != [2, 2, 2] and time.monotonic() < deadline:
            time.sleep(0.2)
        owned = [m.owned() for m in members]
        group = ep.consumer_group(f"kip848-{assignor}")
        # Kafka's own tool describes the group (ConsumerGroupDescribe) while its members are alive
        rows = classic._describe(ep.bootstrap, f"kip848-{assignor}") if assignor is None else None
    finally:
        done.set()
        for m in members:
            m.join(30)
    assert not [m.error for m in members if m.error], [m.error for m in members]
    assert sorted(len(o) for o in owned) == [2, 2, 2], owned
    assert sorted(p for o in owned for p in o) == list(range(PARTITIONS)), owned
    assert set(seen) == history.expected
    assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:10]
    assert group is not None and group[0] >= 3  # three joins, each a new group epoch
    if rows is not None:
        assert sorted(int(r[2]) for r in rows) == list(range(PARTITIONS)), rows
        assert len({r[6] for r in rows}) == 3, rows  # CONSUMER-ID: three members


def test_a_killed_member_s_partitions_move_after_the_session_timeout(
        history: History, tmp_path: Path) -> None:
    ep = _endpoint(history)
    script = tmp_path / "member.py"
    script.write_text(_KILLED_MEMBER)
    proc = subprocess.Popen([sys.executable, str(script), ep.bootstrap, "kip848-kill"],
                            stdout=subprocess.PIPE, text=True)
    seen: collections.Counter[Key] = collections.Counter()
    done = threading.Event()
    survivor = Member(ep.bootstrap, "kip848-kill", seen, done, commit_every=20, delay_s=0.01,
                      remote_assignor="")
    survivor.start()
    victim: list[Key] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # the victim commits every record it prints, then is killed
            victim.append(tuple(json.loads(line)))  # type: ignore[arg-type]
            if len(victim) == 30:
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(30)
        victim += [tuple(json.loads(line)) for line in proc.stdout]  # type: ignore[misc]
        for k in victim:
            seen[k] += 1
        _wait_all(seen, history.expected, [survivor])
        group = ep.consumer_group("kip848-kill")
        members = group[1] if group is not None else -1
    finally:
        done.set()
        survivor.join(30)
        if proc.poll() is None:
            proc.kill()
    assert members == 1  # the silent member was removed after the session timeout
    twice = {k for k, n in seen.items() if n > 1}
    last = {p: max(o for q, o in victim if q == p) for p, _ in victim}
    assert twice <= set(last.items()), (sorted(twice)[:10], last)
    assert set(seen) == history.expected
    assert {p for p, _ in survivor.read} >= {p for p, _ in victim}, "the victim's partitions moved"


_KILLED_MEMBER = """
import json, sys
from confluent_kafka import Consumer
bootstrap, group = sys.argv[1:3]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "isolation.level": "read_uncommitted"})
c.subscribe(["history"])
while True:
    for m in c.consume(1, timeout=0.2):
        if m.error() is None:
            print(json.dumps([m.partition(), m.offset()]), flush=True)
            c.commit(message=m, asynchronous=False)
"""


def test_java_console_consumers_share_a_group(history: History) -> None:
    """Three of Kafka's console consumers with ``group.protocol=consumer``: every record once."""
    ep = _endpoint(history)
    sizes: list[int] = []
    watching = threading.Event()

    def watch() -> None:  # how many members the group had at once
        while not watching.is_set():
            sizes.append(_members(ep, "java-kip848"))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    procs = [subprocess.Popen(
        [*_java_cmd(), "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", ep.bootstrap,
         "--topic", TOPIC, "--group", "java-kip848", "--timeout-ms", "6000",
         "--property", "print.partition=true", "--property", "print.offset=true",
         "--property", "print.value=false", "--consumer-property", "auto.offset.reset=earliest",
         "--consumer-property", "group.protocol=consumer",
         "--consumer-property", "isolation.level=read_uncommitted"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        watching.set()
        watcher.join(5)
    got: collections.Counter[Key] = collections.Counter()
    for out, _err in outs:
        for line in out.splitlines():
            if line.startswith("Partition:"):
                part, off = line.split("\t")[:2]
                got[(int(part.split(":")[1]), int(off.split(":")[1]))] += 1
    assert set(got) == history.expected, outs[0][1][-3000:]
    assert max(got.values()) == 1
    # one group: they were members together (a late JVM may find nothing left to read: correct)
    assert max(sizes) >= 2, sizes[-20:]
    # and every one left it cleanly at exit: the group empties within seconds, long before the
    # 45 s session timeout would remove a member that vanished (a leave may land just after exit)
    wait_for("the group empty after the consumers exit", lambda: _members(ep, "java-kip848") == 0, timeout=10)
