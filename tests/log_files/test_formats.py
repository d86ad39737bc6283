"""Golden bytes and edge cases of the index, snapshot and checkpoint formats."""

from __future__ import annotations

import struct
from pathlib import Path

import google_crc32c
import pytest

from rlm.errors import CheckpointFormatError, IndexFormatError, LogFileGoneError, SnapshotFormatError
from rlm.log import checkpoints as ckpt
from rlm.log.offset_index import encode_offset_index, parse_offset_index, read_offset_index
from rlm.log.partition import LogDir, parse_partition_dir_name
from rlm.log.producer_snapshot import (
    ProducerSnapshotEntry,
    encode_snapshot,
    java_hashmap_order,
    parse_snapshot,
)
from rlm.log.time_index import encode_time_index, parse_time_index
from rlm.log.txn_index import AbortedTxn, collect_aborted, encode_txn_index, parse_txn_index
from rlm.types import KafkaUuid, TopicPartition


# ---- .index ------------------------------------------------------------------------------------
def test_offset_index_golden_and_lookup() -> None:
    data = encode_offset_index([(105, 4200), (130, 9000)], 100)
    assert data == bytes.fromhex("00000005 00001068 0000001e 00002328".replace(" ", ""))
    idx = parse_offset_index(data, 100)
    assert [(e.offset, e.position) for e in idx.entries()] == [(105, 4200), (130, 9000)]
    assert (idx.lookup(99).offset, idx.lookup(99).position) == (100, 0)
    assert idx.lookup(104).position == 0 and idx.lookup(105).position == 4200
    assert idx.lookup(129).position == 4200 and idx.lookup(10**9).position == 9000
    assert idx.last_offset == 130 and idx.to_bytes() == data


def test_offset_index_zero_tail_and_errors(tmp_path: Path) -> None:
    data = encode_offset_index([(5, 100), (9, 200)], 0)
    assert len(parse_offset_index(data + bytes(8 * 100), 0)) == 2  # preallocated active segment
    assert len(parse_offset_index(bytes(8 * 10), 0)) == 0  # preallocated, nothing indexed yet
    with pytest.raises(IndexFormatError, match="multiple of 8") as e:
        parse_offset_index(data + b"\x00\x00\x01", 0, path="x.index")
    assert e.value.position == 16 and e.value.path == "x.index"
    bad = data + struct.pack(">ii", 3, 300)
    with pytest.raises(IndexFormatError, match="does not increase") as e:
        parse_offset_index(bad, 0)
    assert e.value.position == 16
    assert len(parse_offset_index(bad, 0, stale_tail_ok=True)) == 2
    with pytest.raises(IndexFormatError, match="after the zero-filled tail"):
        parse_offset_index(data + bytes(8) + struct.pack(">ii", 20, 900), 0)
    p = tmp_path / "00000000000000000042.index"
    p.write_bytes(encode_offset_index([(50, 10)], 42))
    assert read_offset_index(p).entries()[0].offset == 50
    with pytest.raises(LogFileGoneError):
        read_offset_index(tmp_path / "00000000000000000043.index")


# ---- .timeindex --------------------------------------------------------------------------------
def test_time_index_golden_lookup_and_errors() -> None:
    t0 = 1_700_000_000_000
    data = encode_time_index([(t0, 105), (t0 + 500, 105), (t0 + 1000, 130)], 100)
    assert data[:12] == bytes.fromhex("0000018bcfe56800 00000005".replace(" ", ""))
    ti = parse_time_index(data + bytes(24), 100)
    assert len(ti) == 3
    assert ti.lookup(1_699_999_999_999).timestamp == -1 and ti.lookup(1_699_999_999_999).offset == 100
    assert ti.lookup(1_700_000_000_700).offset == 105 and ti.last_entry.offset == 130
    with pytest.raises(IndexFormatError, match="out of order"):
        parse_time_index(data + struct.pack(">qi", 1_700_000_000_100, 40), 100)
    with pytest.raises(IndexFormatError, match="multiple of 12"):
        parse_time_index(data[:-1], 100)
    with pytest.raises(ValueError):
        encode_time_index([(5, 10), (5, 11)], 0)


# ---- .txnindex ---------------------------------------------------------------------------------
def test_txn_index_golden_and_checks() -> None:
    entries = [AbortedTxn(1000, 10, 20, 21), AbortedTxn(7, 15, 30, 12)]
    data = encode_txn_index(entries)
    assert len(data) == 68
    assert data[:34] == struct.pack(">hqqqq", 0, 1000, 10, 20, 21)
    assert parse_txn_index(data, base_offset=0) == entries
    assert collect_aborted(entries, 21, 100) == ([entries[1]], False)
    assert collect_aborted(entries, 0, 15) == ([entries[0]], True)
    with pytest.raises(IndexFormatError, match="version"):
        parse_txn_index(b"\x00\x01" + data[2:])
    with pytest.raises(IndexFormatError, match="multiple of 34"):
        parse_txn_index(data[:50])
    with pytest.raises(IndexFormatError, match="below the segment base offset") as e:
        parse_txn_index(data, base_offset=25, path="x.txnindex")
    assert e.value.position == 0


# ---- .snapshot ---------------------------------------------------------------------------------
def test_snapshot_golden_and_crc() -> None:
    e = ProducerSnapshotEntry(1000, 2, 41, 500, 9, 1_700_000_000_000, 3, -1)
    data = encode_snapshot([e])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 1000, 2, 41, 500, 9, 1_700_000_000_000, 3, -1)
    assert data == struct.pack(">hI", 1, google_crc32c.value(body)) + body
    assert len(data) == 10 + 46
    assert parse_snapshot(data) == [e] and e.first_sequence == 32
    assert parse_snapshot(encode_snapshot([])) == []
    with pytest.raises(SnapshotFormatError, match="CRC") as err:
        parse_snapshot(data[:-1] + bytes([data[-1] ^ 1]), path="5.snapshot")
    assert err.value.position == 2
    with pytest.raises(SnapshotFormatError, match="version"):
        parse_snapshot(b"\x00\x02" + data[2:])
    with pytest.raises(SnapshotFormatError, match="too short"):
        parse_snapshot(data[:7])


def test_java_hashmap_order() -> None:
    # buckets 0, 0, 1, 3; a bucket keeps insertion order
    assert java_hashmap_order([65536, 16, 0, 3]) == [16, 0, 65536, 3]
    assert java_hashmap_order(range(13)) == list(range(13))  # 13 > 12 entries: 32 buckets
    assert java_hashmap_order([2**32, 1]) == [2**32, 1]  # hash(2^32) = 1: same bucket


# ---- checkpoints ------------------------------------------------------------------------------
def test_leader_epoch_checkpoint() -> None:
    data = b"0\n2\n0 0\n3 1500\n"
    entries = ckpt.parse_leader_epoch_checkpoint(data)
    assert [(e.epoch, e.start_offset) for e in entries] == [(0, 0), (3, 1500)]
    assert ckpt.encode_leader_epoch_checkpoint(entries) == data
    assert ckpt.parse_leader_epoch_checkpoint(b"") == [] and ckpt.parse_leader_epoch_checkpoint(b"0\n") == []
    assert ckpt.parse_leader_epoch_checkpoint(b"0\r\n1\r\n4 7\r\n")[0].start_offset == 7
    cases = {b"1\n0\n": "version", b"0\n2\n0 0\n": "expected 2", b"0\n1\n0 1_0\n": "start offset",
             b"0\n2\n3 5\n2 9\n": "does not increase", b"0\n1\n 0 0\n": "malformed line", b"0\nx\n": "count",
             b"0\n1\n0 0\n\n": "malformed line", b"\xff\n": "UTF-8"}
    for raw, msg in cases.items():
        with pytest.raises(CheckpointFormatError, match=msg):
            ckpt.parse_leader_epoch_checkpoint(raw, path="leader-epoch-checkpoint")
    with pytest.raises(CheckpointFormatError) as e:
        ckpt.parse_leader_epoch_checkpoint(b"0\n2\n0 0\n1 x\n")
    assert e.value.position == 8


def test_offset_checkpoints_and_partition_metadata() -> None:
    offsets = {TopicPartition("a.b-c_d", 0): 5, TopicPartition("__consumer_offsets", 49): 0}
    data = ckpt.encode_offset_checkpoint(offsets)
    assert data == b"0\n2\na.b-c_d 0 5\n__consumer_offsets 49 0\n"
    assert ckpt.parse_offset_checkpoint(data) == offsets
    with pytest.raises(CheckpointFormatError):
        ckpt.parse_offset_checkpoint(b"0\n1\ntopic 0\n")
    uid = KafkaUuid.from_text("3Xa1bQp_R8Gx0yq9nC2k-A")
    meta = ckpt.encode_partition_metadata(uid)
    assert meta == b"version: 0\ntopic_id: 3Xa1bQp_R8Gx0yq9nC2k-A"
    assert ckpt.parse_partition_metadata(meta) == uid
    for bad in (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
                b"version: 1\ntopic_id: 3Xa1bQp_R8Gx0yq9nC2k-A",
                b"version: 0\ntopic_id: 3Xa1bQp_R8Gx0yq9nC2k-B", b"version: 0", b"version:0\ntopic_id: x"):
        with pytest.raises(CheckpointFormatError):
            ckpt.parse_partition_metadata(bad)


def test_meta_properties_and_clean_shutdown(tmp_path: Path) -> None:
    java = (b"#\n#Sun Nov 22 02:00:00 UTC 2026\nnode.id=1\ndirectory.id=3Xa1bQp_R8Gx0yq9nC2k-A\nversion=1\n"
            b"cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    m = ckpt.parse_meta_properties(java)
    assert (m.version, m.node_id, m.cluster_id) == (1, 1, "MkU3OEVBNTcwNTJENDM2Qk")
    assert m.directory_id == KafkaUuid.from_text("3Xa1bQp_R8Gx0yq9nC2k-A")
    assert ckpt.parse_meta_properties(ckpt.encode_meta_properties(m)) == m
    assert ckpt.parse_properties(b"a\\:b = c\\\n  d\n! comment\nk:v\n") == {"a:b": "cd", "k": "v"}
    with pytest.raises(CheckpointFormatError, match=r"missing node\.id"):
        ckpt.parse_meta_properties(b"version=1\ncluster.id=x\n")
    assert ckpt.parse_clean_shutdown(b'{"version":0,"brokerEpoch":17}') == 17
    assert ckpt.parse_clean_shutdown(b"") == -1
    with pytest.raises(CheckpointFormatError):
        ckpt.parse_clean_shutdown(b"{")
    assert not ckpt.has_clean_shutdown(tmp_path)
    (tmp_path / ".kafka_cleanshutdown").write_bytes(ckpt.encode_clean_shutdown(3))
    assert ckpt.has_clean_shutdown(tmp_path)


# ---- directory names ---------------------------------------------------------------------------
def test_partition_dir_names(tmp_path: Path) -> None:
    assert parse_partition_dir_name("my-topic-3") == (TopicPartition("my-topic", 3), None)
    uid = "0123456789abcdef0123456789abcdef"
    for suffix in ("delete", "future", "stray"):
        assert parse_partition_dir_name(f"t.x-12.{uid}-{suffix}") == (TopicPartition("t.x", 12), suffix)
    for bad in ("topic", "-3", "topic-", "topic-x", "topic-99999999999"):
        with pytest.raises(ValueError):
            parse_partition_dir_name(bad)
    for name in ("orders-0", f"orders-1.{uid}-delete", f"orders-2.{uid}-future", "__cluster_metadata-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "recovery-point-offset-checkpoint").write_bytes(b"0\n1\norders 0 7\n")
    (tmp_path / "replication-offset-checkpoint").write_bytes(b"0\n1\norders 0 5\n")
    ld = LogDir(tmp_path)
    assert [p.topic_partition for p in ld.partitions()] == [TopicPartition("__cluster_metadata", 0),
                                                             TopicPartition("orders", 0)]
    assert ld.high_watermark(TopicPartition("orders", 0)) == 5
    assert ld.high_watermark(TopicPartition("other", 0)) == 0
    assert ld.checkpoint(ckpt.RECOVERY_POINT_CHECKPOINT) == {TopicPartition("orders", 0): 7}
