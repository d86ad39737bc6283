"""Disaster recovery across two clusters: cluster A is lost, its bucket brings the topic back in B.

Cluster A (the session broker) holds a mixed topic — two codecs, a committed and an aborted
transaction, idempotent producers — tiered by the daemon into SeaweedFS (s3 plugin) and a metadata
topic of A; the broker's retention then deletes the tiered segments locally. What consumers of A
read, at both isolation levels, is recorded. Then A is destroyed: the topic and its metadata topic
are deleted. Cluster B is a new KRaft node (new topic id):

1. ``rlm metadata rebuild`` fills a recovery store (a file store) from the bucket alone;
2. the topic is created in B; ``rlm restore --adopt-into`` writes the whole old history into B's
   sidecar store under the **new** topic id, pointing at the objects of the old one;
3. B is stopped, ``rlm restore`` writes the newest segments into its partition directory, B starts.

Then, at both isolation levels: a consumer of B's broker reads the restored tail exactly as A
served it, and a consumer of the Kafka endpoint in merged mode (B's sidecar configuration) reads
the **whole** history exactly as A served it — same offsets, keys, values, timestamps, headers.
``rlm verify`` finds the adopted range complete. New records continue at the old end offset, and
B's daemon tiers them under the new topic id without copying the restored or adopted segments
again; with ``retention.bytes`` lowered, it deletes the oldest adopted segment and with it the
original objects (under the old topic id). The new idempotent producer works because ``rlm
restore --reserve-producer-ids`` moved B's producer-id allocator past the restored producer ids
(without it, it is handed id 0, which the restored state holds, and fails with
OUT_OF_ORDER_SEQUENCE_NUMBER). The recovery store is a file store: it must stay readable while B's
broker is stopped.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.cli import main
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import read_partition_metadata
from rlm.log.encode import encode_batch
from rlm.log.partition import PartitionDir
from rlm.log.producer_snapshot import read_snapshot
from rlm.plugin_setup import load_rlmm
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState
from tests.daemon.helpers import create_topic, produce_txn, s3_storage, transactional_producer, wait_for
from tests.daemon.test_metadata_rebuild_broker import write_config
from tests.kafka_endpoint.test_merged_faults import _set_retention
from tests.services.kafka import KafkaCluster
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]

Row = tuple[int, bytes | None, bytes | None, int, Any]


def produce_codec(bootstrap: str, topic: str, n: int, codec: str) -> None:
    """``n`` incompressible 1000-byte records with headers from an idempotent ``codec`` producer."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.size": 16384, "compression.type": codec})
    for i in range(n):
        p.produce(topic, key=f"{codec}{i}".encode(), value=os.urandom(1000), partition=0,
                  headers=[("codec", codec.encode())])
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def produce_aborted(bootstrap: str, topic: str, txn_id: str, n: int) -> None:
    """A transaction whose ``n`` records reach the log before it is aborted (librdkafka purges
    records still queued when ``abort_transaction`` is called: flush first)."""
    p = transactional_producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=f"a{i}".encode(), value=os.urandom(1000), partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(30)


def consume(bootstrap: str, topic: str, start: int, end: int, isolation: str) -> list[Row]:
    """Records of ``[start, end)`` as a consumer at ``isolation`` sees them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rlm-restore-{topic}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, start)])
        out: list[Row] = []
        for _ in range(600):
            for m in c.consume(500, timeout=1.0):
                assert m.error() is None, m.error()
                if m.offset() < end:
                    out.append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers()))
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                return out
        raise AssertionError(f"{topic}: consumer did not reach offset {end}")
    finally:
        c.close()


def reads(bootstrap: str, topic: str, start: int, end: int) -> dict[str, list[Row]]:
    return {iso: consume(bootstrap, topic, start, end, iso) for iso in ("read_committed", "read_uncommitted")}


def cut(rows: dict[str, list[Row]], start: int) -> dict[str, list[Row]]:
    return {iso: [r for r in rs if r[0] >= start] for iso, rs in rows.items()}


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rlm-restore-wm-{topic}"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return int(low), int(high)
    finally:
        c.close()


def finished_segments(cfg: Path, topic: str) -> list[RemoteLogSegmentMetadata]:
    rlmm = load_rlmm(load_config(cfg), -1, read_only=True)
    try:
        rlmm.follow_all()
        (tp,) = [tp for tp in rlmm.known_partitions() if tp.topic == topic]
        return [md for md in rlmm.list_remote_log_segments(tp)
                if md.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    finally:
        rlmm.close()


def bucket_keys(server: Any, bucket: str, contains: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=server.endpoint_url, region_name=REGION,
                      aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", []) if contains in o["Key"]]


def produce_as(bootstrap: str, topic: str, batch: bytes) -> tuple[int, int]:
    """Send one v2 batch in a raw Produce v3 (acks=all): (error code, base offset). librdkafka
    cannot be handed an old producer id; this is what an old producer's next send looks like."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    name, client = topic.encode(), b"rlm-test"
    body = (struct.pack(">hhih", 0, 3, 1, len(client)) + client + struct.pack(">hhi", -1, -1, 30_000)
            + struct.pack(">ih", 1, len(name)) + name + struct.pack(">iii", 1, 0, len(batch)) + batch)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        data = _recv(sock, size)
    pos = 4 + 4  # correlation id, responses count
    (n,) = struct.unpack_from(">h", data, pos)
    pos += 2 + n + 4  # topic name, partition count
    _index, error, base_offset = struct.unpack_from(">ihq", data, pos)
    return error, base_offset


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_topic_comes_back_in_a_new_cluster_from_the_bucket(
        kafka: Any, seaweedfs: Any, seaweedfs_bucket: str, unique_topic: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    topic, a = unique_topic, kafka
    storage = s3_storage(seaweedfs, seaweedfs_bucket)
    # ---- cluster A: a mixed topic, tiered, partly deleted locally ------------------------------
    create_topic(a.bootstrap, topic)  # 1 MiB segments
    produce_codec(a.bootstrap, topic, 1200, "lz4")
    produce_txn(a.bootstrap, topic, f"{topic}-c", 300, commit=True, size=1000)
    produce_aborted(a.bootstrap, topic, f"{topic}-a", 300)
    produce_codec(a.bootstrap, topic, 1200, "zstd")
    cfg_a = write_config(tmp_path / "a" / "rlm.yaml", a, storage, topic, f"rlm_md_{topic}")
    d = Daemon(load_config(cfg_a), once=True).start()
    assert d.run_once() == 0
    assert d.stop()
    pdir_a = a.log_dir / f"{topic}-0"
    tiered_end = PartitionDir(pdir_a).segments[-1].base_offset  # every rolled segment is tiered
    served = reads(a.bootstrap, topic, 0, tiered_end)
    assert len(served["read_uncommitted"]) - len(served["read_committed"]) == 300  # the aborted txn
    _set_retention(a.bootstrap, topic, "1")  # local retention deletes the tiered segments
    wait_for("A's local segments deleted", lambda: PartitionDir(pdir_a).segments[0].base_offset > 0)
    # ---- A is destroyed, with its metadata topic ------------------------------------------------
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for f in admin.delete_topics([topic, f"rlm_md_{topic}"]).values():
        f.result(30)

    b = KafkaCluster(nodes=1, name="restore-b").start()
    try:
        cfg_r = tmp_path / "recovery" / "rlm.yaml"  # a file store: readable while B is stopped
        cfg_r.parent.mkdir()
        cfg_r.write_text(json.dumps({"log_dirs": [str(b.log_dir)], "work_dir": str(cfg_r.parent),
                                     "storage": storage, "http": {"enabled": False}}))
        cfg_b = write_config(tmp_path / "b" / "rlm.yaml", b, storage, topic, "rlm_md_b")
        rebuilt = cli(capsys, "metadata", "rebuild", "--config", str(cfg_r), "--topic", topic, "--execute")
        n = rebuilt["partitions"][0]["written"]
        assert n >= 2
        create_topic(b.bootstrap, topic)  # a new topic id
        target = b.log_dir / f"{topic}-0"
        wait_for("partition dir on B", lambda: (target / "partition.metadata").exists())
        new_id = read_partition_metadata(target / "partition.metadata")
        restore = ["restore", "--config", str(cfg_r), "--topic", topic, "--log-dir", str(b.log_dir)]
        # A is gone for good: its topic id's reference to the objects is released, so B's
        # retention alone decides when they are deleted (rlm.daemon.shared_objects)
        (ad,) = cli(capsys, *restore, "--adopt-into", str(cfg_b), "--release-source", "--execute")["adopted"]
        assert ad["topic_id"] == new_id.text != ad["from_topic_id"]
        assert (ad["written"], ad["first_offset"], ad["next_offset"]) == (n, 0, tiered_end)
        b.stop_node(1)
        (part,) = cli(capsys, *restore, "--local-bytes", "1", "--execute")["partitions"]
        first, nxt = part["first_offset"], part["next_offset"]
        assert part["skipped"] is None and nxt == tiered_end and 0 < first < nxt
        b.start_node(1)
        reserved = cli(capsys, *restore, "--reserve-producer-ids", b.bootstrap, "--execute")
        highest = reserved["highest_restored_producer_id"]
        assert highest >= 0 and all(pid > highest for pid in reserved["first_new_producer_id"].values())

        # ---- B serves what A served ------------------------------------------------------------
        assert read_partition_metadata(target / "partition.metadata") == new_id
        assert watermarks(b.bootstrap, topic) == (first, nxt)
        assert reads(b.bootstrap, topic, first, nxt) == cut(served, first)
        fetcher = RemoteFetcher.from_config(load_config(cfg_b))
        endpoint = EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp_path / "endpoint")
        try:
            assert [tp.topic_id for tp in fetcher.topics()[topic]] == [new_id]
            assert reads(endpoint.bootstrap, topic, 0, nxt) == served
        finally:
            endpoint.close()
            fetcher.close()
        verified = cli(capsys, "verify", "--config", str(cfg_b), "--topic", topic)
        (tiers,) = [part["tiers"] for part in verified["partitions"]]
        assert verified["ok"], verified  # every adopted segment whole, no gap on the lineage
        assert (tiers["remote_start"], tiers["remote_end"], tiers["local_start"], tiers["gap"]) == (
            0, nxt, first, None), tiers  # and the remote range meets the restored local log

        # ---- an old idempotent producer continues its sequence at the old end offset -----------
        entries = read_snapshot(target / f"{nxt:020d}.snapshot")
        old = max((e for e in entries if e.current_txn_first_offset < 0), key=lambda e: e.last_offset)
        batch = encode_batch([(b"old-producer", b"resumed", [], int(time.time() * 1000))], base_offset=0,
                             producer_id=old.producer_id, producer_epoch=old.producer_epoch,
                             base_sequence=old.last_sequence + 1)
        assert produce_as(b.bootstrap, topic, batch) == (0, nxt)  # no OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt_new = nxt + 1

        # ---- new records continue at the old end offset and are tiered under the new id --------
        got: list[int] = []
        p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for i in range(1100):
            p.produce(topic, key=f"n{i}".encode(), value=os.urandom(1000), partition=0,
                      on_delivery=lambda err, msg: got.append(-1 if err else msg.offset()))
        assert p.flush(30) == 0
        assert min(got) == nxt_new and -1 not in got
        wait_for("a new segment rolled on B", lambda: PartitionDir(target).segments[-1].base_offset > nxt)
        d = Daemon(load_config(cfg_b), once=True).start()
        assert d.run_once() == 0
        assert d.stop()
        segs = finished_segments(cfg_b, topic)
        assert {md.remote_log_segment_id.topic_id_partition.topic_id for md in segs} == {new_id}
        new = sorted(md.start_offset for md in segs if md.start_offset >= nxt)
        assert len(segs) == n + len(new) and new and new[0] == nxt  # nothing restored copied again

        # ---- retention on an adopted segment deletes its original objects ----------------------
        oldest = min(segs, key=lambda md: md.start_offset)
        objects = bucket_keys(seaweedfs, seaweedfs_bucket, oldest.remote_log_segment_id.id.text)
        # stored under the old id; under the new one only its reference (rlm.daemon.shared_objects)
        assert objects and all(ad["from_topic_id"] in k or k.endswith(".rlm_descriptor") for k in objects)
        doc = json.loads(cfg_b.read_text())  # remote retention is the sidecar's topic setting
        doc["topics"][0]["retention.bytes"] = sum(md.segment_size_in_bytes for md in segs) \
            - oldest.segment_size_in_bytes
        cfg_b.write_text(json.dumps(doc))
        d = Daemon(load_config(cfg_b), once=True).start()
        assert d.run_once() == 0
        assert d.stop()
        assert bucket_keys(seaweedfs, seaweedfs_bucket, oldest.remote_log_segment_id.id.text) == []
        assert {md.remote_log_segment_id for md in finished_segments(cfg_b, topic)} == {
            md.remote_log_segment_id for md in segs} - {oldest.remote_log_segment_id}
    finally:
        b.stop()
