"""Issue 25 on three real KRaft nodes: a history with an unclean election, restored with RF 3.

Role A (the lost cluster): a topic on replicas [1, 3] (unclean election allowed) holds lz4
records with headers from an idempotent producer, a committed and an aborted transaction; node 3
stops, node 1 acknowledges and tiers a tail alone, node 1 stops, node 3 is elected uncleanly and
writes zstd records at the tail's offsets, and tiers them. The bucket now holds node 1's diverged
copies beside the lineage. What consumers read (both isolation levels) and what the original
metadata makes a reader choose are recorded; then the topic and its metadata topic are deleted.

Role B (the new cluster, replication factor 3), exactly the RF 3 runbook of
docs/disaster-recovery.md: ``rlm metadata rebuild`` into a file store (it must skip only node 1's
diverged copies and read like the original store); the topic recreated on replicas [1, 2, 3]
(a new topic id); ``rlm restore --adopt-into``; the leader epoch raised by leader moves; the
replicas reduced to [1]; node 1 stopped; ``rlm restore --local-bytes``; node 1 started; the
replicas set back to [1, 2, 3], so nodes 2 and 3 start from empty directories and catch up from
node 1. Then: the three nodes' logs are the same bytes from the same log start; a consumer reads
the restored tail as A served it with node 1 leading and with node 2 leading; the Kafka endpoint
in merged mode reads the whole history as A served it; ``rlm verify`` is clean.

Why the same three nodes play both roles: one multi-broker cluster per session (the package's
``cluster3``). B is "new" for everything restore depends on: the topic and its metadata topic
are gone, the recreated topic has a new id and starts at leader epoch 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.cli import main
from rlm.config import load_config
from rlm.log.checkpoints import read_partition_metadata
from rlm.log.partition import PartitionDir
from rlm.types import TopicIdPartition
from tests.daemon.helpers import SEGMENT_BYTES, produce_txn, wait_for
from tests.daemon.test_restore_broker import cut, produce_aborted, produce_codec, reads, watermarks
from tests.faults.cluster_helpers import leader_of, listed, unclean_failover
from tests.faults.proc_helpers import rolled_end
from tests.faults.test_cluster_history import (
    HOUR_MS,
    Sidecars,
    checkpoint,
    create_tiered_topic,
    elect,
    produce_acked,
    replicas_of,
)
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.slow]
A, B, C = 1, 2, 3


def run(*args: str) -> tuple[int, Any]:
    """``rlm ... --json`` in process: (exit status, parsed output)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([*args, "--json"])
    return rc, json.loads(out.getvalue())


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[pos]
        n, pos, shift = n | (b & 0x7F) << shift, pos + 1, shift + 7
        if b < 0x80:
            return n, pos


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size, data = None, b""
        while size is None or len(data) < size + 4:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            data += chunk
            if size is None and len(data) >= 4:
                size = struct.unpack(">i", data[:4])[0]
    return data[4:]


def reassign(port: int, topic: str, replicas: list[int]) -> None:
    """Partition 0's replicas set to ``replicas`` by a raw AlterPartitionReassignments v0 (the
    JVM tool, ``kafka-reassign-partitions``, costs seconds of start-up per call; this, one round
    trip). ``port``: any running broker (it forwards the request to the controller)."""
    client, name = b"rlm-test", topic.encode()
    header = struct.pack(">hhih", 45, 0, 1, len(client)) + client + b"\x00"
    body = (struct.pack(">i", 30_000) + _uvarint(2) + _uvarint(len(name) + 1) + name + _uvarint(2)
            + struct.pack(">i", 0) + _uvarint(len(replicas) + 1)
            + b"".join(struct.pack(">i", r) for r in replicas) + b"\x00\x00\x00")
    data = _exchange(port, header + body)
    pos = 4 + 1 + 4  # correlation id, no tagged fields, throttle time
    (error,) = struct.unpack_from(">h", data, pos)
    assert error == 0, f"AlterPartitionReassignments: error {error}"
    n, pos = _read_uvarint(data, pos + 2)  # error message (compact nullable string)
    pos += max(n - 1, 0)
    _topics, pos = _read_uvarint(data, pos)
    n, pos = _read_uvarint(data, pos)
    _parts, pos = _read_uvarint(data, pos + n - 1)
    _index, error = struct.unpack_from(">ih", data, pos)
    assert error == 0, f"AlterPartitionReassignments {topic}-0 -> {replicas}: error {error}"


def lead(c: KafkaCluster, topic: str, order: list[int]) -> None:
    """Replicas ``order``, led by ``order[0]`` (a preferred election: deterministic)."""
    reassign(c.node(B).broker_port, topic, order)
    wait_for(f"replica order {order}", lambda: replicas_of(c.bootstrap, topic) == order, timeout=60)
    elect(c.bootstrap, topic, ElectionType.PREFERRED)
    wait_for(f"{order[0]} leads {topic}", lambda: leader_of(c.bootstrap, topic) == order[0], timeout=60)


def chosen(f: RemoteFetcher, topic: str) -> Any:
    """What the metadata makes a reader choose: the segments and ranges, the lineage, gaps, bounds
    (the records themselves are compared through the consumers)."""
    plan = f.plan(topic, 0)
    return ([(s.metadata.remote_log_segment_id, s.first, s.last) for s in plan.segments],
            plan.lineage, plan.gaps, plan.log_start, plan.log_end)


def isr(bs: str, topic: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10)
    return sorted(int(r) for r in md.topics[topic].partitions[0].isrs)


def log_bytes(c: KafkaCluster, node: int, topic: str) -> tuple[int | None, bytes]:
    """A node's log start and every record batch of its log, in offset order."""
    d = pdir(c, node, topic)
    return d.log_start_offset, b"".join(s.log_path.read_bytes() for s in d.segments)


def pdir(c: KafkaCluster, node: int, topic: str) -> PartitionDir:
    """The node's partition directory, scanned now."""
    return PartitionDir(c.node(node).log_dir / f"{topic}-0")


def lost_cluster(c: KafkaCluster, tmp: Path, cars: Sidecars, topic: str) -> dict[str, Any]:
    """Role A: the mixed history with an unclean election, tiered; what it served and what its
    metadata made a reader choose, recorded before the topic and its metadata topic are deleted."""
    bs = c.bootstrap
    unclean = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    create_tiered_topic(c, topic, [A, C], **unclean)
    tidp = TopicIdPartition(pdir(c, A, topic).topic_id, topic, 0)
    a_car, c_car = cars.start_inproc(A), cars.start_inproc(C)
    produce_codec(bs, topic, 1200, "lz4")
    produce_txn(bs, topic, f"{topic}-c", 300, commit=True, size=1000)
    produce_aborted(bs, topic, f"{topic}-a", 300)
    shared_end = pdir(c, A, topic).log_end_offset()
    c.stop_node(C)
    produce_acked(bs, topic, 1500, "tail")  # acknowledged by node 1 alone
    tail_end = rolled_end(c.node(A).log_dir / f"{topic}-0")
    wait_for("node 1 tiered its tail", lambda: cars.tiered_to(A, tail_end), timeout=120)
    tail = {m.remote_log_segment_id.id.text for m in listed(a_car, tidp) if m.end_offset >= shared_end}
    assert tail, "node 1 tiered segments of the tail"
    unclean_failover(c, topic, A, cars.daemons.pop(A), C)
    c.start_node(A, wait=False)  # it will truncate to node 3's log and follow
    produce_codec(bs, topic, 2200, "zstd")  # other records at the tail's offsets, and beyond
    last = rolled_end(c.node(C).log_dir / f"{topic}-0")
    wait_for("node 3 tiered its log", lambda: cars.tiered_to(C, last), timeout=120)
    end = last + 1  # every rolled segment is tiered
    cars.wait_passes(C, 2)
    admin = AdminClient({"bootstrap.servers": bs})
    wait_for("node 1 back", lambda: A in admin.list_topics(timeout=10).brokers, timeout=120)
    reader = load_config(None, **cars.settings(C, tmp / "reader"))
    with RemoteFetcher.from_config(reader) as orig:
        original = chosen(orig, topic)
    segs = listed(c_car, tidp)
    assert tail <= {m.remote_log_segment_id.id.text for m in segs}, "the diverged copies are still listed"
    served = reads(bs, topic, 0, end)
    assert len(served["read_uncommitted"]) - len(served["read_committed"]) == 300  # the aborted txn
    assert not any(k.startswith(b"tail-") for _o, k, *_ in served["read_uncommitted"] if k)
    epochs = max(e for e, _ in checkpoint(c, C, topic))
    assert epochs > 0, "the unclean election raised the leader epoch"
    cars.stop_all()
    for f in admin.delete_topics([topic, cars.meta_topic]).values():
        f.result(30)
    wait_for("the topic is gone", lambda: topic not in admin.list_topics(timeout=10).topics, timeout=60)
    return {"end": end, "served": served, "original": original, "tail": tail, "epoch": epochs,
            "segments": {m.remote_log_segment_id.id.text for m in segs}}


def test_restore_with_replication_factor_3_after_an_unclean_election(
        cluster3: KafkaCluster, tmp_path: Path) -> None:
    """Cluster lost after an unclean election left diverged copies in the bucket: rebuilt from the
    bucket and restored into three brokers with RF 3, every replica serves what the cluster served.

    ``rlm metadata rebuild`` skips only the deposed leader's diverged copies and the read core
    answers from the rebuilt store as from the original; after the RF 3 runbook, followers that
    started empty hold the restored leader's log byte for byte; consumers of the brokers (tail)
    and of the merged endpoint (whole history) read exactly what the lost cluster served, at both
    isolation levels; ``rlm verify`` is clean.
    """
    c, topic = cluster3, "dr-rf3"
    bs = c.bootstrap
    cars = Sidecars(c, tmp_path, topic, off_lineage_grace_ms=HOUR_MS)
    try:
        a = lost_cluster(c, tmp_path, cars, topic)
        end, served = a["end"], a["served"]
        # ---- 1. the recovery store, rebuilt from the bucket alone --------------------------------
        s = cars.settings(A, tmp_path / "recovery")
        s["metadata"] = {"manager": "file"}
        cfg_r = tmp_path / "recovery.yaml"
        cfg_r.write_text(json.dumps(s, default=str))
        rc, rebuilt = run("metadata", "rebuild", "--config", str(cfg_r), "--topic", topic, "--execute")
        assert rc == 0, rebuilt
        (part,) = rebuilt["partitions"]
        kept = {seg["segment_id"] for seg in part["keep"]}
        skipped = {seg["segment_id"] for seg in part["skip"]}
        assert skipped and skipped <= a["tail"], (skipped, a["tail"])  # only node 1's diverged copies
        assert kept | skipped == a["segments"] and part["written"] == len(kept)
        with RemoteFetcher.from_config(load_config(cfg_r)) as new:
            assert chosen(new, topic) == a["original"]  # the lineage the original metadata chose
        # ---- 2. the topic in B (RF 3, a new id); the history adopted under it -----------------------
        create_tiered_topic(c, topic, [A, B, C])
        log_dir = c.node(A).log_dir
        new_id = read_partition_metadata(log_dir / f"{topic}-0" / "partition.metadata")
        b_settings = cars.settings(A, tmp_path / "b")
        b_settings["metadata"]["config"]["remote.log.metadata.topic.name"] = f"__rlm_meta_{topic}_b"
        cfg_b = tmp_path / "b.yaml"
        cfg_b.write_text(json.dumps(b_settings, default=str))
        restore = ["restore", "--config", str(cfg_r), "--topic", topic, "--log-dir", str(log_dir)]
        rc, adopted = run(*restore, "--adopt-into", str(cfg_b), "--execute")
        assert rc == 0, adopted
        (ad,) = adopted["adopted"]
        assert ad["topic_id"] == new_id.text != ad["from_topic_id"] and ad["written"] == len(kept)
        # ---- 3. node 1's leader epoch raised to the restored history's (the dry run says) ---------
        tail_restore = [*restore, "--local-bytes", str(2 * SEGMENT_BYTES)]
        for _ in range(4):
            _rc, dry = run(*tail_restore)
            (plan,) = dry["partitions"]
            if plan["leader_epoch_problem"] is None:
                break
            lead(c, topic, [B, A, C])  # each election raises the epoch by one
            lead(c, topic, [A, B, C])
        assert plan["leader_epoch_problem"] is None, plan
        assert max(e for e, _ in plan["leader_epochs"]) == a["epoch"] > 0  # the unclean election's
        # ---- 4. node 1 alone hosts the partition; stopped; the tail restored; started -------------
        lead(c, topic, [A])
        wait_for("nodes 2 and 3 dropped their replicas",
                 lambda: not any((c.node(n).log_dir / f"{topic}-0").exists() for n in (B, C)), timeout=60)
        c.stop_node(A)
        try:
            rc, restored = run(*tail_restore, "--execute")
        finally:
            c.start_node(A)
        assert rc == 0, restored
        (pr,) = restored["partitions"]
        first, nxt = pr["first_offset"], pr["next_offset"]
        assert pr["skipped"] is None and nxt == end and 0 < first < nxt, pr
        wait_for("node 1 leads the restored partition", lambda: leader_of(bs, topic) == A, timeout=90)
        rc, reserved = run(*restore, "--reserve-producer-ids", bs, "--execute")
        assert rc == 0, reserved
        # ---- 5. back to RF 3: nodes 2 and 3 start empty and catch up from node 1 ------------------
        lead(c, topic, [A, B, C])
        wait_for("nodes 2 and 3 in sync", lambda: isr(bs, topic) == [A, B, C], timeout=120)
        wait_for("the followers' logs end at the old end offset", lambda: all(
            pdir(c, n, topic).log_end_offset() == nxt for n in (B, C)), timeout=60)
        leader_log = log_bytes(c, A, topic)
        assert leader_log[0] == first
        assert log_bytes(c, B, topic) == leader_log == log_bytes(c, C, topic)  # same batches, same offsets
        assert watermarks(bs, topic) == (first, nxt)
        assert reads(bs, topic, first, nxt) == cut(served, first)  # node 1 leads
        lead(c, topic, [B, A, C])
        assert reads(bs, topic, first, nxt) == cut(served, first)  # node 2 leads, from its own copy
        # ---- 6. the whole history through the endpoint in merged mode; verify --------------------
        reader_b = RemoteFetcher.from_config(load_config(cfg_b))
        endpoint = EndpointThread(reader_b, ListenerSettings(port=0, merged=True), tmp_path / "endpoint")
        try:
            assert reads(endpoint.bootstrap, topic, 0, nxt) == served
        finally:
            endpoint.close()
            reader_b.close()
        rc, verified = run("verify", "--config", str(cfg_b), "--topic", topic)
        (tiers,) = [p["tiers"] for p in verified["partitions"]]
        assert rc == 0 and verified["ok"], verified
        assert (tiers["remote_start"], tiers["remote_end"], tiers["gap"]) == (0, nxt, None), tiers
    finally:
        cars.stop_all()
        for n in c.node_ids:
            if c.node(n).proc is None:
                c.start_node(n)
