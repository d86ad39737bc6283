"""The daemon standalone (``--once``, embedded file metadata store) tiering to the real mini HDFS
through the ``fsspec`` storage plugin (``webhdfs://``).

A partition written by ``rlm.log.writer`` (~4 MB: idempotent data, a committed and an aborted
transaction, and a transaction still open near the log end so the LSO sits inside an inactive
segment). Every inactive segment below the LSO must be COPY_SEGMENT_FINISHED with byte-identical
``.log``/``.index``/``.timeindex``/``.txnindex``/``.snapshot`` files on HDFS, read both through the
plugin's fetch API and straight through the WebHDFS filesystem; the segment holding the open
transaction and the active segment must not be copied; a second pass copies nothing.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import rsm_plugins
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import MetaProperties
from rlm.log.lso import last_stable_offset
from rlm.log.partition import PartitionDir
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import (
    IndexType,
    KafkaUuid,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    TopicPartition,
)
from rlmm.file import FileRemoteLogMetadataManager
from rsm_plugins.layout import SegmentFileType, kafka_relative_path
from tests.daemon.helpers import check_segment_against_local, read_all

pytestmark = pytest.mark.hdfs

TOPIC = "hdfs-tiered"
SEG_BYTES = 700_000
BATCHES = 210  # ~20 KB each: ~4.2 MB in 6 segments (5 rolled + the active one)
TXN_PID, OPEN_PID = 77, 88


def write_partition(log_dir: Path) -> TopicIdPartition:
    """Idempotent batches, a committed (batches 10-12) and an aborted (50-52) transaction, and a
    transaction opened at batch 150 that is never decided (it holds the LSO back)."""
    rnd = random.Random(20261122)
    tid = KafkaUuid.random()
    w = PartitionWriter(log_dir / f"{TOPIC}-0", topic_id=tid, config=WriterConfig(segment_bytes=SEG_BYTES))
    for b in range(BATCHES):
        recs = [(f"k{b}-{i}".encode(), rnd.randbytes(1000)) for i in range(20)]
        if b in (10, 11, 50, 51):
            w.append(recs, producer_id=TXN_PID, producer_epoch=0, transactional=True)
        elif b in (12, 52):
            w.end_transaction(TXN_PID, 0, commit=b == 12)
        elif b == 150:
            w.append(recs, producer_id=OPEN_PID, producer_epoch=0, transactional=True)
        else:
            w.append(recs, producer_id=11, producer_epoch=0)
    w.close()
    write_log_dir_files(
        log_dir,
        [(TopicPartition(TOPIC, 0), w.log_end_offset)],
        meta=MetaProperties(1, "hdfs-tiering-cluster-01", 1),
    )
    return TopicIdPartition(tid, TOPIC, 0)


def daemon_config(log_dir: Path, work: Path, storage: dict[str, Any]) -> DaemonConfig:
    return load_config(
        None,
        log_dirs=[str(log_dir)],
        work_dir=str(work),
        storage=storage,
        task_interval_ms=200,
        rescan_interval_ms=300,
        http={"enabled": False},
        topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
    )


def run_once(cfg: DaemonConfig) -> None:
    d = Daemon(cfg, once=True).start()
    try:
        assert d.run_once() == 0
    finally:
        d.stop()


def remote_segments(work: Path, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    """Every segment in the embedded file metadata store, in offset order."""
    m = FileRemoteLogMetadataManager.open(work / "metadata")
    try:
        m.on_partition_leadership_changes({tip}, set())
        return sorted(m.list_remote_log_segments(tip), key=lambda s: s.start_offset)
    finally:
        m.close()


def test_standalone_once_tiers_to_hdfs(tmp_path: Path, hdfs: Any, hdfs_path: str) -> None:
    logs, work = tmp_path / "logs", tmp_path / "work"
    tip = write_partition(logs)
    pdir = PartitionDir(logs / f"{TOPIC}-0")
    total = sum(s.log_path.stat().st_size for s in pdir.segments)
    assert 3_000_000 < total < 5_500_000

    lso = last_stable_offset(pdir)
    inactive = pdir.inactive_segments()
    active = pdir.active_segment
    assert active is not None and len(inactive) >= 4
    eligible = [s for s in inactive if (n := pdir.next_segment(s)) is not None and n.base_offset <= lso]
    held_back = [s for s in inactive if s not in eligible]
    assert len(eligible) >= 3 and held_back, f"the open transaction must pin the LSO ({lso}) mid-log"
    assert any(s.txn_index_path.exists() and s.txn_index_path.stat().st_size > 0 for s in eligible)

    root = f"{hdfs.url_prefix}{hdfs_path}/tiered"
    plugin_cfg = {"url": root, "storage_options": {"user": hdfs.user}}
    storage = {"plugin": "fsspec", "config": plugin_cfg}
    cfg = daemon_config(logs, work, storage)
    run_once(cfg)

    segs = remote_segments(work, tip)
    assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in segs), segs
    assert [s.start_offset for s in segs] == [s.base_offset for s in eligible]
    assert all(s.start_offset < active.base_offset for s in segs), "the active segment was copied"
    assert not {s.start_offset for s in segs} & {s.base_offset for s in held_back}, "copied above the LSO"
    assert segs[-1].end_offset < lso

    rsm = rsm_plugins.load("fsspec", plugin_cfg)
    fs = hdfs.webhdfs_filesystem()
    try:
        txn_seen = False
        for md in segs:
            check_segment_against_local(rsm, md, pdir)  # through the plugin's fetch API
            seg = next(s for s in pdir.segments if s.base_offset == md.start_offset)
            nxt = pdir.next_segment(seg)
            assert nxt is not None
            local: dict[SegmentFileType, Path] = {
                SegmentFileType.SEGMENT: seg.log_path,
                SegmentFileType.OFFSET_INDEX: seg.index_path,
                SegmentFileType.TIME_INDEX: seg.time_index_path,
                SegmentFileType.PRODUCER_SNAPSHOT: pdir.snapshot_path(nxt.base_offset),
            }
            txn = seg.txn_index_path
            if txn.exists() and txn.stat().st_size > 0:
                local[SegmentFileType.TRANSACTION_INDEX] = txn
                txn_seen = True
                assert read_all(rsm.fetch_index(md, IndexType.TRANSACTION)) == txn.read_bytes()
            for ft, path in local.items():  # straight from HDFS, bypassing the plugin
                remote = f"{hdfs_path}/tiered/{kafka_relative_path(md, ft)}"
                assert fs.cat_file(remote) == path.read_bytes(), f"{remote} differs from {path.name}"
        assert txn_seen, "no copied segment carried the aborted transaction's index"

        part_dir = f"{hdfs_path}/tiered/{kafka_relative_path(segs[0], SegmentFileType.SEGMENT).split('/')[0]}"

        def listing() -> dict[str, tuple[Any, ...]]:  # a rewrite changes the HDFS file id and mtime
            return {
                e["name"].rsplit("/", 1)[-1]: (e["size"], e["modificationTime"], e["fileId"])
                for e in fs.ls(part_dir, detail=True)
            }

        before = listing()
        assert not any(n.endswith(".tmp") for n in before), "temporary files left behind"
        logs_remote = sorted(n for n in before if n.endswith(".log"))
        assert [int(n[:20]) for n in logs_remote] == [s.base_offset for s in eligible]

        # idempotent: a second pass finds everything copied and writes nothing
        run_once(cfg)
        again = remote_segments(work, tip)
        assert [(s.remote_log_segment_id, s.state) for s in again] == [
            (s.remote_log_segment_id, s.state) for s in segs
        ]
        assert listing() == before
    finally:
        rsm.close()
