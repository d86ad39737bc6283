"""The ``local`` plugin against Apache Kafka's own ``LocalTieredStorage`` (kafka-storage 4.1.1 test jar).

Kafka's class runs in a JVM through ``java/LocalTieredStorageGolden.java`` (compiled at test time).
Checked both ways on real segment files written by :class:`rlm.log.PartitionWriter` (one segment with
an aborted transaction, so a ``.txnindex``, one without):

* the same segment copied by Kafka and by us gives byte-identical directory trees (names and bytes);
* what Kafka copied, we read (every file, a range, the missing transaction index);
* what we copied, Kafka reads (same checks, through its ``fetchLogSegment``/``fetchIndex``);
* each side's delete removes what the other wrote.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import rsm_plugins
from rlm.errors import RemoteResourceNotFoundError
from rlm.log import PartitionWriter, WriterConfig
from rlm.types import (
    IndexType,
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from rsm_plugins.testing import read_all
from tests.services.proc import ensure_jars, java

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SOURCE = Path(__file__).parent / "java" / "LocalTieredStorageGolden.java"
TOPIC, PARTITION = "golden.topic", 3


@dataclass(frozen=True)
class Harness:
    classes: Path
    lib: Path

    def run(self, mode: str, root: Path, md: RemoteLogSegmentMetadata, *args: str) -> None:
        tp = md.topic_id_partition
        cmd = [
            java(),
            "-Xmx128m",
            "-cp",
            f"{self.classes}:{self.lib / '*'}",
            "LocalTieredStorageGolden",
            mode,
            str(root),
            tp.topic,
            str(tp.partition),
            tp.topic_id.text,
            md.remote_log_segment_id.id.text,
            str(md.start_offset),
            str(md.end_offset),
            str(md.segment_size_in_bytes),
            *args,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"LocalTieredStorageGolden {mode} failed:\n{res.stderr[-4000:]}"


@pytest.fixture(scope="module")
def kafka_lts(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    lib = ensure_jars("kafka")
    out = tmp_path_factory.mktemp("lts-classes")
    javac = shutil.which("javac") or str(Path(java()).resolve().parent / "javac")
    subprocess.run(
        [javac, "-nowarn", "-cp", str(lib / "*"), "-d", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return Harness(out, lib)


@dataclass(frozen=True)
class Seg:
    md: RemoteLogSegmentMetadata
    data: LogSegmentData
    epoch_file: Path


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[Seg]:
    """Two rolled segments of a real partition directory: the first holds an aborted transaction."""
    base = tmp_path_factory.mktemp("partition")
    pdir = base / f"{TOPIC}-{PARTITION}"
    topic_id = KafkaUuid.random()
    w = PartitionWriter(
        pdir, topic_id=topic_id, config=WriterConfig(segment_bytes=64 * 1024, index_interval_bytes=1024)
    )
    for i in range(60):
        w.append([(f"k{i}".encode(), os.urandom(2500))])
        if i == 4:
            w.append([(b"tx", b"aborted")], producer_id=7, producer_epoch=0, transactional=True)
            w.abort(7, 0)
    w.close()
    bases = w.segments
    assert len(bases) >= 3
    tp = TopicIdPartition(topic_id, TOPIC, PARTITION)
    out = []
    for base_offset, next_offset in itertools.pairwise(bases[:3]):

        def f(suffix: str, offset: int = base_offset) -> Path:
            return pdir / f"{offset:020d}{suffix}"

        txn = f(".txnindex") if f(".txnindex").exists() and f(".txnindex").stat().st_size else None
        epochs = f"0\n1\n0 {bases[0]}\n".encode()
        epoch_file = base / f"{base_offset}.epochs"
        epoch_file.write_bytes(epochs)
        data = LogSegmentData(
            f(".log"), f(".index"), f(".timeindex"), txn, f(".snapshot", next_offset), epochs
        )
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            base_offset,
            next_offset - 1,
            0,
            0,
            0,
            f(".log").stat().st_size,
            ((0, base_offset),),
        )
        out.append(Seg(md, data, epoch_file))
    assert out[0].data.transaction_index is not None and out[1].data.transaction_index is None
    return out


def copy_args(seg: Seg) -> list[str]:
    d = seg.data
    return [
        str(d.log_segment),
        str(d.offset_index),
        str(d.time_index),
        str(d.transaction_index) if d.transaction_index else "-",
        str(d.producer_snapshot_index),
        str(seg.epoch_file),
    ]


def expected_files(seg: Seg) -> dict[IndexType | str, bytes]:
    d = seg.data
    out: dict[IndexType | str, bytes] = {
        "SEGMENT": d.log_segment.read_bytes(),
        IndexType.OFFSET: d.offset_index.read_bytes(),
        IndexType.TIMESTAMP: d.time_index.read_bytes(),
        IndexType.LEADER_EPOCH: d.leader_epoch_index,
        IndexType.PRODUCER_SNAPSHOT: d.producer_snapshot_index.read_bytes(),
    }
    if d.transaction_index is not None:
        out[IndexType.TRANSACTION] = d.transaction_index.read_bytes()
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_tree_as_kafka(kafka_lts: Harness, segments: list[Seg], tmp_path: Path) -> None:
    kafka_dir, our_dir = tmp_path / "kafka", tmp_path / "ours"
    ours = rsm_plugins.load("local", {"dir": str(our_dir), "broker.id": 0})
    for seg in segments:
        kafka_lts.run("copy", kafka_dir, seg.md, *copy_args(seg))
        ours.copy_log_segment_data(seg.md, seg.data)
    kafka_tree, our_tree = tree(kafka_dir), tree(our_dir)
    assert sorted(kafka_tree) == sorted(our_tree)
    assert kafka_tree == our_tree
    tp = segments[0].md.topic_id_partition
    sid = segments[0].md.remote_log_segment_id.id.text
    assert (
        f"kafka-tiered-storage/{TOPIC}-{PARTITION}-{tp.topic_id.text}/{segments[0].md.start_offset:020d}-{sid}.log"
        in our_tree
    )
    assert len(our_tree) == 11  # 6 files + 5 (no .txnindex for the second segment)


def test_we_read_what_kafka_wrote(kafka_lts: Harness, segments: list[Seg], tmp_path: Path) -> None:
    ours = rsm_plugins.load(
        "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
        {"dir": str(tmp_path), "broker.id": 0},
    )
    for seg in segments:
        kafka_lts.run("copy", tmp_path, seg.md, *copy_args(seg))
        want = expected_files(seg)
        assert read_all(ours.fetch_log_segment(seg.md, 0)) == want["SEGMENT"]
        mid = seg.md.segment_size_in_bytes // 2
        assert read_all(ours.fetch_log_segment(seg.md, mid, mid + 99)) == want["SEGMENT"][mid : mid + 100]
        for index_type in IndexType:
            if index_type in want:
                assert read_all(ours.fetch_index(seg.md, index_type)) == want[index_type]
            else:
                with pytest.raises(RemoteResourceNotFoundError):
                    ours.fetch_index(seg.md, index_type)
        ours.delete_log_segment_data(seg.md)
        with pytest.raises(RemoteResourceNotFoundError):
            ours.fetch_log_segment(seg.md, 0)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_kafka_reads_what_we_wrote(kafka_lts: Harness, segments: list[Seg], tmp_path: Path) -> None:
    ours = rsm_plugins.load("local", {"root": str(tmp_path / "kafka-tiered-storage")})
    for i, seg in enumerate(segments):
        ours.copy_log_segment_data(seg.md, seg.data)
        out = tmp_path / f"out-{i}"
        out.mkdir()
        start = seg.md.segment_size_in_bytes // 3
        kafka_lts.run("fetch", tmp_path, seg.md, str(out), str(start))
        want = expected_files(seg)
        assert (out / "SEGMENT").read_bytes() == want["SEGMENT"]
        assert (out / "RANGE").read_bytes() == want["SEGMENT"][start:]
        for index_type in IndexType:
            if index_type in want:
                assert (out / index_type.name).read_bytes() == want[index_type], index_type
            else:
                assert (out / f"{index_type.name}.missing").exists(), index_type
        kafka_lts.run("delete", tmp_path, seg.md)
        with pytest.raises(RemoteResourceNotFoundError):
            ours.fetch_log_segment(seg.md, 0)
        with pytest.raises(RemoteResourceNotFoundError):
            ours.fetch_index(seg.md, IndexType.OFFSET)
