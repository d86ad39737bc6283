"""Issue 20 on three real KRaft nodes: history survives leadership changes, sidecars start together.

Brokers beside this sidecar know nothing of the remote tier: their ``retention.*`` is the local
retention and their ``leader-epoch-checkpoint`` describes only what is local. When node B leads
past node A's local retention, A's broker deletes B's first offsets and its checkpoint starts B's
epoch at A's *local* log start. When A leads again, its sidecar must not take B's remote segments
below that start for "off the lineage": those offsets exist nowhere else. The tests here check
behaviour only: which FINISHED segments survive, what a reader (``fetcher.RemoteFetcher``) can
read compared with what the producer had acknowledged, and ``rlm verify --deep``.

Node roles are fixed by the replica order (A=1, B=2, C=3); leadership moves by reordering the
replicas (``kafka-reassign-partitions``) and a preferred election, so the broker's automatic
preferred-leader balancing never moves it behind the test's back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from fetcher import RemoteFetcher
from rlm.config import DaemonConfig, load_config
from rlm.daemon import clock
from rlm.daemon.service import Daemon
from rlm.errors import RlmError
from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import SEGMENT_BYTES, wait_for
from tests.daemon.rebuild_helpers import read_path
from tests.faults.cluster_helpers import (
    elect,
    leader_of,
    listed,
    settings,
    tiered_past,
    unclean_failover,
    verify_config,
)
from tests.faults.proc_helpers import (
    all_segments,
    local_storage,
    read_status_file,
    rolled_end,
    start_daemon,
    stop_daemon,
    verify,
    write_config,
)
from tests.services.kafka import KafkaCluster
from tests.services.proc import kill

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.slow]
S = RemoteLogSegmentState
A, B, C = 1, 2, 3
VALUE_BYTES = 1000  # ~1,000 records per 1 MiB segment
#: The brokers' own ``retention.bytes`` on the topic: the LOCAL retention (one segment's worth).
LOCAL_RETENTION_BYTES = SEGMENT_BYTES
#: The sidecar's topic settings: the REMOTE retention, unlimited, so nothing may be deleted.
REMOTE_RETENTION = {"retention.ms": -1, "retention.bytes": -1}

Acked = dict[int, tuple[bytes, bytes]]


# ---- cluster operations ------------------------------------------------------------------------
def create_tiered_topic(c: KafkaCluster, topic: str, replicas: list[int], **config: str) -> None:
    """One partition on ``replicas`` (the first is the preferred leader), 1 MiB segments."""
    bs = c.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    conf = {"segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2", **config}
    new = NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=conf)
    admin.create_topics([new])[topic].result(timeout=60)
    wait_for(f"{topic} led by {replicas[0]}", lambda: leader_of(bs, topic) == replicas[0], timeout=60)
    wait_for(
        f"{topic}'s partition dirs",
        lambda: all((c.node(n).log_dir / f"{topic}-0" / "partition.metadata").exists() for n in replicas),
        timeout=60,
    )


def produce_acked(bs: str, topic: str, n: int, tag: str) -> Acked:
    """``n`` records with unique keys (``acks=all``); returns offset -> (key, value) of each ack."""
    acked: Acked = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked[msg.offset()] = (msg.key(), msg.value())
        else:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": bs,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 65536,
        }
    )
    for i in range(n):
        key = f"{tag}-{i}".encode()
        p.produce(topic, key=key, value=key.ljust(VALUE_BYTES, b"."), partition=0, on_delivery=on_delivery)
        if i % 200 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors and len(acked) == n, (errors[:5], len(acked))
    return acked


def replicas_of(bs: str, topic: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10)
    return [int(r) for r in md.topics[topic].partitions[0].replicas]


def move_leadership(c: KafkaCluster, topic: str, order: list[int], tmp: Path) -> None:
    """Make ``order[0]`` the preferred replica and elect it (a graceful, deterministic move)."""
    plan = tmp / f"reassign-{'-'.join(map(str, order))}.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": order}]})
    )
    c.run_class(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--bootstrap-server",
        c.bootstrap,
        "--reassignment-json-file",
        str(plan),
        "--execute",
        check=True,
    )
    wait_for(f"replica order {order}", lambda: replicas_of(c.bootstrap, topic) == order, timeout=60)
    elect(c.bootstrap, topic, ElectionType.PREFERRED)
    wait_for(f"{order[0]} leads {topic}", lambda: leader_of(c.bootstrap, topic) == order[0], timeout=60)


def set_broker_retention(bs: str, topic: str, retention_bytes: int) -> None:
    """The broker's own topic ``retention.bytes``: beside this sidecar, the local retention."""
    entry = ConfigEntry("retention.bytes", str(retention_bytes), incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=60)


def checkpoint(c: KafkaCluster, node: int, topic: str) -> list[tuple[int, int]]:
    """The node's broker ``leader-epoch-checkpoint``, as (epoch, start offset)."""
    return [
        (e.epoch, e.start_offset) for e in PartitionDir(c.node(node).log_dir / f"{topic}-0").leader_epochs()
    ]


def local_start(c: KafkaCluster, node: int, topic: str) -> int:
    start = PartitionDir(c.node(node).log_dir / f"{topic}-0").log_start_offset
    return -1 if start is None else start


# ---- sidecars ------------------------------------------------------------------------------------
class Sidecars:
    """One sidecar per node: A and C in-process, B an ``rlm run`` subprocess (so it can be SIGKILLed)."""

    def __init__(self, c: KafkaCluster, tmp: Path, topic: str, **extra: Any) -> None:
        self.c, self.tmp, self.topic, self.extra = c, tmp, topic, extra
        self.meta_topic = f"__rlm_meta_{topic}"
        self.daemons: dict[int, Daemon] = {}
        self.works: dict[int, Path] = {}
        self.b_proc: subprocess.Popen[bytes] | None = None

    def settings(self, node: int, work: Path | None = None) -> dict[str, Any]:
        return settings(
            self.c,
            node,
            self.tmp,
            self.topic,
            self.meta_topic,
            3,
            work,
            storage=local_storage(self.tmp / "remote"),
            topics=[{"pattern": self.topic, "remote.storage.enable": True, **REMOTE_RETENTION}],
            **self.extra,
        )

    def config(self, node: int, work: Path | None = None) -> DaemonConfig:
        return load_config(None, **self.settings(node, work))

    def start_inproc(self, node: int, work: Path | None = None) -> Daemon:
        cfg = self.config(node, work)
        self.works[node] = cfg.work_dir
        self.daemons[node] = Daemon(cfg).start()
        return self.daemons[node]

    def start_b(self) -> None:
        s = self.settings(B)
        self.works[B] = Path(s["work_dir"])
        cfg = write_config(self.tmp / "b.yaml", **s)
        self.b_proc = start_daemon(cfg, self.tmp / "b.log")

    def status(self, node: int) -> dict[str, Any]:
        part: dict[str, Any] = (
            read_status_file(self.works[node]).get("partitions", {}).get(f"{self.topic}-0", {})
        )
        return part

    def tiered_to(self, node: int, end: int) -> bool:
        st = self.status(node)
        return bool(st) and st["role"] == "leader" and st["remote_end"] >= end and not st["last_error"]

    def wait_role(self, node: int, role: str) -> None:
        wait_for(
            f"node {node}'s sidecar sees it is {role}",
            lambda: self.status(node).get("role") == role,
            timeout=60,
        )

    def wait_passes(self, node: int, n: int) -> None:
        """``n`` task runs (copy + expiry pass) of the node's sidecar as leader, without an error."""
        seen: set[int] = set()

        def more() -> bool:
            st = self.status(node)
            if st.get("role") == "leader" and not st.get("last_error") and st.get("last_run_ms", -1) > 0:
                seen.add(st["last_run_ms"])
            return len(seen) > n  # the first run seen may have begun before the leadership change

        wait_for(f"{n} passes of node {node}'s sidecar as leader", more, timeout=120)

    def stop_all(self) -> None:
        try:
            if self.b_proc is not None:
                stop_daemon(self.b_proc)
                self.b_proc = None
        finally:
            for d in self.daemons.values():
                d.stop(30)
            self.daemons.clear()


# ---- what survived ------------------------------------------------------------------------------
def finished(cfg: Path, tip: TopicIdPartition, reader: Path) -> dict[str, RemoteLogSegmentMetadata]:
    """FINISHED segments by id, as a fresh reader of the metadata store sees them."""
    return {
        m.remote_log_segment_id.id.text: m
        for m in all_segments(cfg, tip, reader)
        if m.state is S.COPY_SEGMENT_FINISHED
    }


def ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as inclusive [first, last] runs (for readable failure messages)."""
    out: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if out and o == out[-1][1] + 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def read_remote(cfg: DaemonConfig, topic: str) -> tuple[dict[int, tuple[bytes, bytes]], str | None]:
    """Every record a reader gets from the remote tier (offset -> key, value), and its error if any."""
    got: dict[int, tuple[bytes, bytes]] = {}
    try:
        with RemoteFetcher.from_config(cfg) as f:
            for batch in f.scan(topic, 0):
                tab = pa.Table.from_batches([batch])
                cols = (tab.column(n).to_pylist() for n in ("offset", "key", "value"))
                for o, k, v in zip(*cols, strict=True):
                    got[o] = (k, v)
    except RlmError as e:
        return got, f"{type(e).__name__}: {e}"
    return got, None


def unreadable(acked: Acked, got: dict[int, tuple[bytes, bytes]], up_to: int) -> list[tuple[int, int]]:
    """Acknowledged offsets <= ``up_to`` that the reader did not return with the produced record."""
    return ranges([o for o, kv in acked.items() if o <= up_to and got.get(o) != kv])


# ---- the scenario --------------------------------------------------------------------------------
def leadership_returns_after_local_retention(c: KafkaCluster, tmp: Path, topic: str, *, kill_b: bool) -> None:
    """A leads and tiers; B leads past A's local retention and tiers; A leads again.

    With ``kill_b``: B's broker and sidecar are SIGKILLed while B leads, so A leads again by
    failover; after its sidecar's passes, that sidecar is replaced by one with an empty work dir
    (a cold restart while A leads), which must judge the lineage with nothing remembered.
    """
    bs = c.bootstrap
    create_tiered_topic(c, topic, [A, B, C])
    pdir_a, pdir_b = (c.node(n).log_dir / f"{topic}-0" for n in (A, B))
    tip = TopicIdPartition(PartitionDir(pdir_a).topic_id, topic, 0)
    cars = Sidecars(c, tmp, topic)
    vcfg = verify_config(c, tmp, topic, cars.meta_topic)
    acked: Acked = {}
    try:
        cars.start_inproc(A)
        cars.start_inproc(C)
        cars.start_b()
        # 1. A leads (its sidecar learns this epoch) and tiers
        acked |= produce_acked(bs, topic, 2500, "a")
        a_end = rolled_end(pdir_a)
        wait_for("A tiered its epoch", lambda: cars.tiered_to(A, a_end), timeout=120)
        # 2. B leads, long enough to outlast A's local retention, and tiers
        move_leadership(c, topic, [B, A, C], tmp)
        cars.wait_role(A, "follower")
        on_b = produce_acked(bs, topic, 5000, "b")
        acked |= on_b
        b_first = min(on_b)
        b_epoch = checkpoint(c, B, topic)[-1][0]
        tiered_end = rolled_end(pdir_b)
        wait_for("B tiered its epoch", lambda: cars.tiered_to(B, tiered_end), timeout=120)
        # 3. local retention deletes B's first offsets on every broker; A's checkpoint now starts
        #    B's epoch at A's local log start (the precondition of the bug)
        set_broker_retention(bs, topic, LOCAL_RETENTION_BYTES)

        def shortened() -> bool:
            cp, start = checkpoint(c, A, topic), local_start(c, A, topic)
            return bool(cp) and cp[0] == (b_epoch, start) and start > b_first

        wait_for("A's broker shortened B's epoch to its local log start", shortened, timeout=120)
        cp_a = checkpoint(c, A, topic)
        before = finished(vcfg, tip, tmp / "reader-before")
        assert max(m.end_offset for m in before.values()) >= tiered_end
        # 4. A leads again
        if kill_b:
            b_broker = c.node(B).proc
            assert cars.b_proc is not None and b_broker is not None
            cars.b_proc.kill()  # SIGKILL: no drain, no cleanup (not a process group leader)
            cars.b_proc.wait(10)
            cars.b_proc = None
            kill(b_broker)
            c.node(B).proc = None
            wait_for("A leads after B's broker died", lambda: leader_of(bs, topic) == A, timeout=90)
            acked |= produce_acked(bs, topic, 200, "a2")  # stays in A's active segment
            cars.wait_passes(A, 4)  # A's sidecar, which remembers A's own epoch
            cars.daemons.pop(A).stop(30)
            cars.start_inproc(A, tmp / "work1-cold")  # empty work dir: nothing remembered
        else:
            move_leadership(c, topic, [A, B, C], tmp)
            acked |= produce_acked(bs, topic, 200, "a2")
        cars.wait_passes(A, 4)
        after = finished(vcfg, tip, tmp / "reader-after")
    finally:
        cars.stop_all()
        if c.node(B).proc is None:
            c.start_node(B)
    lost = sorted(
        (m.start_offset, m.end_offset, str(m.segment_leader_epochs))
        for k, m in before.items()
        if k not in after
    )
    got, read_error = read_remote(load_config(None, **cars.settings(A, tmp / "reader-read")), topic)
    missing = unreadable(acked, got, tiered_end)
    assert not lost and not missing and read_error is None, (
        f"FINISHED segments deleted (remote retention is unlimited): {lost}; "
        f"acknowledged offsets <= {tiered_end} unreadable: {missing}; read error: {read_error}; "
        f"A's checkpoint before it led again: {cp_a}; B's epoch {b_epoch} began at {b_first}"
    )
    verify(vcfg, topic)


def test_returning_leader_keeps_history_beyond_its_local_log(cluster3: KafkaCluster, tmp_path: Path) -> None:
    """A leads, B leads past A's local retention, A leads again (graceful moves): nothing is lost.

    No FINISHED segment is deleted (remote retention is unlimited), every acknowledged offset up
    to B's tiered end reads back as produced, and ``rlm verify --deep`` is clean.
    """
    leadership_returns_after_local_retention(cluster3, tmp_path, "hist-return", kill_b=False)


def test_leader_killed_then_cold_sidecar_keeps_history(cluster3: KafkaCluster, tmp_path: Path) -> None:
    """B's broker and sidecar SIGKILLed while B leads, A's sidecar later restarted cold: nothing lost.

    A leads again by failover, first with the sidecar that remembers A's own epoch, then with
    one restarted on an empty work dir, whose lineage can only come from the remote metadata and
    the broker's shortened checkpoint. No FINISHED segment is deleted, every acknowledged offset
    up to B's tiered end reads back as produced, and ``rlm verify --deep`` is clean.
    """
    leadership_returns_after_local_retention(cluster3, tmp_path, "hist-kill", kill_b=True)


# ---- an unclean election ------------------------------------------------------------------------
HOUR_MS = 3600 * 1000


def consume_from(bs: str, topic: str, until: int) -> Acked:
    """Offset -> (key, value) of everything a consumer reads from offset 0 up to ``until``."""
    cons = Consumer({"bootstrap.servers": bs, "group.id": f"hist-{topic}", "enable.auto.commit": False})
    cons.assign([TopicPartition(topic, 0, 0)])
    out: Acked = {}

    def caught_up() -> bool:
        for m in cons.consume(500, 0.5):
            if not m.error():
                out[m.offset()] = (m.key(), m.value())
        return bool(cons.position([TopicPartition(topic, 0)])[0].offset >= until)

    try:
        wait_for(f"a consumer read {topic} up to {until}", caught_up, timeout=120, interval=0)
    finally:
        cons.close()
    return out


def segment_ids(d: Daemon, tip: TopicIdPartition) -> dict[str, RemoteLogSegmentState]:
    return {m.remote_log_segment_id.id.text: m.state for m in listed(d, tip)}


def rebuilt_reads_the_same(cars: Sidecars, tmp: Path, reader: DaemonConfig, lost: set[str]) -> None:
    """Issue 25 on a real history: the metadata store rebuilt from the bucket alone (``rlm metadata
    rebuild`` into a new file store) skips only lost-tail copies and reads like the original."""
    s = cars.settings(C, tmp / "rebuilt")
    s["metadata"] = {"manager": "file"}
    path = tmp / "rebuilt.yaml"
    path.write_text(json.dumps(s, default=str))  # YAML is a superset of JSON
    proc = subprocess.run([sys.executable, "-m", "rlm.cli", "metadata", "rebuild", "--config", str(path),
                           "--topic", cars.topic, "--execute", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    (part,) = json.loads(proc.stdout)["partitions"]
    skipped = {seg["segment_id"] for seg in part["skip"]}
    assert skipped and skipped <= lost, (skipped, lost)
    with RemoteFetcher.from_config(reader) as orig, RemoteFetcher.from_config(load_config(path)) as new:
        assert read_path(new, cars.topic) == read_path(orig, cars.topic)


def test_unclean_election_quarantines_then_deletes_the_lost_tail(
    cluster3: KafkaCluster, tmp_path: Path
) -> None:
    """An unclean election loses A's acknowledged tail: its segments are quarantined, then deleted.

    Replicas A and C (min.insync 1, unclean election on). C stops; A acknowledges and tiers a tail
    alone; A stops; C starts and is elected uncleanly, and writes other records at those offsets.
    C's sidecar keeps the tail's segments (quarantined, listed in its status) while the grace
    period runs and deletes them after it (the daemon's clock is jumped past the grace period);
    at no point does a reader return a record of the lost tail, and what it returns is what a
    consumer reads from C. While the tail is quarantined, a metadata store rebuilt from the bucket
    alone (``rlm metadata rebuild``) skips lost-tail copies and reads exactly like the original.
    """
    c, topic = cluster3, "hist-unclean"
    bs = c.bootstrap
    create_tiered_topic(
        c, topic, [A, C], **{"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    )
    pdir_a, pdir_c = (c.node(n).log_dir / f"{topic}-0" for n in (A, C))
    tip = TopicIdPartition(PartitionDir(pdir_a).topic_id, topic, 0)
    # an hour's grace period, ended by jumping the in-process daemon's clock (no real wait); on a
    # build without the setting, the test shows what that build does (deletes at once)
    grace = {"off_lineage_grace_ms": HOUR_MS} if "off_lineage_grace_ms" in DaemonConfig.model_fields else {}
    cars = Sidecars(c, tmp_path, topic, **grace)
    vcfg = verify_config(c, tmp_path, topic, cars.meta_topic)
    reader = load_config(None, **cars.settings(C, tmp_path / "reader"))

    def reads_only_c(on_c: Acked, tail: Acked) -> dict[int, tuple[bytes, bytes]]:
        got, err = read_remote(reader, topic)
        assert err is None, err
        assert not {k for k, _ in got.values()} & {k for k, _ in tail.values()}, "a lost-tail record was read"
        wrong = ranges([o for o, kv in got.items() if on_c.get(o) != kv])
        assert not wrong, f"offsets read differently from C's log: {wrong}"
        return got

    try:
        a, c_car = cars.start_inproc(A), cars.start_inproc(C)
        shared = produce_acked(bs, topic, 2500, "shared")
        wait_for("A tiered the shared records", lambda: cars.tiered_to(A, rolled_end(pdir_a)), timeout=120)
        c.stop_node(C)
        tail = produce_acked(bs, topic, 2500, "tail")  # acknowledged by A alone
        tail_end = rolled_end(pdir_a)
        wait_for("A tiered the tail", lambda: cars.tiered_to(A, tail_end), timeout=120)
        lost = tiered_past(a, tip, A, max(shared))
        assert lost, "A tiered the tail"
        unclean_failover(c, topic, A, cars.daemons.pop(A), C)
        produce_acked(bs, topic, 2500, "c")  # other records at the tail's offsets
        c_end = rolled_end(pdir_c)
        wait_for("C tiered its log", lambda: cars.tiered_to(C, c_end), timeout=120)
        cars.wait_passes(C, 4)
        states = segment_ids(c_car, tip)
        deleted = sorted(r for sid, r in lost.items() if states.get(sid) is not S.COPY_SEGMENT_FINISHED)
        assert not deleted, (
            f"the lost tail's segments were deleted at once, within the grace period: {deleted}"
        )
        wait_for(
            "the lost tail quarantined (rlm status)",
            lambda: set(lost) <= {q[0] for q in cars.status(C).get("quarantined", [])},
            timeout=60,
        )
        on_c = consume_from(bs, topic, PartitionDir(pdir_c).log_end_offset())
        reads_only_c(on_c, tail)
        rebuilt_reads_the_same(cars, tmp_path, reader, set(lost))
        clock.set_offset_ms(2 * HOUR_MS)  # the grace period is over
        wait_for(
            "the lost tail deleted after the grace period",
            lambda: not set(lost) & set(segment_ids(c_car, tip)),
            timeout=120,
        )
        clock.set_offset_ms(0)
        got = reads_only_c(on_c, tail)
        assert not unreadable(on_c, got, c_end), "C's tiered log reads back whole"
        wait_for("nothing left in quarantine (rlm status)", lambda: not cars.status(C).get("quarantined"))
    finally:
        clock.set_offset_ms(0)
        cars.stop_all()
        for n in (A, C):
            if c.node(n).proc is None:
                c.start_node(n)
    verify(vcfg, topic)


# ---- sidecars started together -------------------------------------------------------------------
def test_sidecars_started_together_all_run(cluster3: KafkaCluster, tmp_path: Path) -> None:
    """Three ``rlm run`` started at once against a cluster without the metadata topic: all run.

    They race to create the topic; a loser's preflight or creation sees it being created or
    TOPIC_ALREADY_EXISTS, which is success. The topic exists, with the configured partition
    count. The race's window is milliseconds wide (a listing that says "absent", then a
    validate-only create that says "exists"), so this guards the fix more than it reproduces
    the failure: without the fix it passed six rounds out of six here.
    """
    c = cluster3
    topic = "start-race"
    create_tiered_topic(c, topic, [A, B, C])
    start_together(c, tmp_path / "r0", topic, "__rlm_meta_race")


def start_together(c: KafkaCluster, tmp: Path, topic: str, meta_topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    assert meta_topic not in admin.list_topics(timeout=10).topics
    tmp.mkdir()
    works: dict[int, Path] = {}
    cfgs: dict[int, Path] = {}
    for n in c.node_ids:
        s = settings(c, n, tmp, topic, meta_topic, 3, storage=local_storage(tmp / "remote"))
        s["metadata"]["config"]["remote.log.metadata.topic.num.partitions"] = 3
        works[n] = Path(s["work_dir"])
        cfgs[n] = write_config(tmp / f"node{n}.yaml", **s)
    procs = {n: start_daemon(cfgs[n], tmp / f"node{n}.log") for n in c.node_ids}
    try:
        wait_for(
            "every sidecar running or exited",
            lambda: all(
                p.poll() is not None or read_status_file(works[n]).get("state") == "running"
                for n, p in procs.items()
            ),
            timeout=120,
        )
        exits = {n: p.poll() for n, p in procs.items()}
    finally:
        codes: dict[int, int | str] = {}
        for n, p in procs.items():
            try:
                codes[n] = stop_daemon(p)
            except subprocess.TimeoutExpired as e:  # killed: every other one is still stopped
                codes[n] = str(e)
    logs = {n: (tmp / f"node{n}.log").read_text()[-1500:] for n in procs if exits[n] is not None}
    assert all(e is None for e in exits.values()), f"{meta_topic}: exit statuses {exits}: {logs}"
    assert all(code == 0 for code in codes.values()), codes
    t = admin.list_topics(meta_topic, timeout=10).topics[meta_topic]
    assert t.error is None and len(t.partitions) == 3, t
