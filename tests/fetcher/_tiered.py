"""A standalone tiered partition for read-side tests: written by ``rlm.log.writer``, tiered by the
daemon (``--once``: local storage + file metadata store), and the local truth to compare with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import MetaProperties
from rlm.log.partition import PartitionDir
from rlm.log.records import Compression, Record, iter_batches, iter_records
from rlm.log.txn_index import read_txn_index
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, TopicIdPartition, TopicPartition

SEG = 16 * 1024
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
BASE_TS = 1_700_000_000_000


@dataclass
class Tiered:
    logs: Path
    work: Path
    tip: TopicIdPartition
    config: DaemonConfig
    epoch_change_offset: int

    @property
    def pdir(self) -> PartitionDir:
        return PartitionDir(self.logs / f"{self.tip.topic}-{self.tip.partition}")

    def tiered_segments(self) -> list[Any]:
        return list(self.pdir.inactive_segments())

    def local_records(self) -> list[tuple[int, bytes | None, bytes | None, int]]:
        out = []
        for seg in self.tiered_segments():
            for _h, r in iter_records(seg.log_path):
                if isinstance(r, Record):
                    out.append((r.offset, r.key, r.value, r.timestamp))
        return out

    def local_committed(self) -> list[tuple[int, bytes | None, bytes | None, int]]:
        """Records minus those of aborted transactions (from the local .txnindex files)."""
        aborted: set[int] = set()
        txns = [t for seg in self.pdir.segments
                for t in (read_txn_index(seg.txn_index_path) if seg.txn_index_path.exists() else [])]
        for seg in self.tiered_segments():
            for h in iter_batches(seg.log_path):
                if h.is_transactional and not h.is_control and any(
                        t.producer_id == h.producer_id and t.first_offset <= h.base_offset <= t.last_offset
                        for t in txns):
                    aborted.update(range(h.base_offset, h.last_offset + 1))
        return [r for r in self.local_records() if r[0] not in aborted]

    def local_bytes(self) -> bytes:
        return b"".join(seg.log_path.read_bytes() for seg in self.tiered_segments())

    def remote_files(self, suffix: str) -> list[Path]:
        return sorted((self.work / "remote").rglob(f"*{suffix}"))


def write_mixed_partition(logs: Path, topic: str = "mixed",
                          batches: int = 240) -> tuple[TopicIdPartition, int]:
    """Every codec, idempotent and transactional batches (commits and aborts), CreateTime going
    backwards, headers, null keys, and a leader-epoch change half way."""
    tid = KafkaUuid.random()
    w = PartitionWriter(logs / f"{topic}-0", topic_id=tid, config=WriterConfig(segment_bytes=SEG))
    epoch_change = -1
    for b in range(batches):
        if b == batches // 2:
            w.set_leader_epoch(4)
            epoch_change = w.log_end_offset
        ts0 = BASE_TS + b * 1000 - (5000 if b % 7 == 3 else 0)  # some batches go back in time
        recs = [(None if i == 0 else f"k{b}-{i}".encode(), f"value-{b}-{i}".encode() * 5,
                 [("h", f"{b}".encode())] if i % 3 == 0 else [], ts0 + (i * 37) % 500) for i in range(15)]
        codec = CODECS[b % len(CODECS)]
        if b % 6 == 5:
            w.append(recs, producer_id=900, producer_epoch=0, transactional=True, compression=codec, now=ts0)
            w.end_transaction(900, 0, commit=b % 12 != 11, now=ts0 + 600)
        else:
            w.append(recs, producer_id=10, producer_epoch=0, compression=codec, now=ts0)
    w.close()
    write_log_dir_files(logs, [(TopicPartition(topic, 0), w.log_end_offset)],
                        meta=MetaProperties(1, "standalone-cluster-0001", 1))
    return TopicIdPartition(tid, topic, 0), epoch_change


def tier(base: Path, **read: Any) -> Tiered:
    logs = base / "logs"
    tip, change = write_mixed_partition(logs)
    cfg = load_config(None, log_dirs=[str(logs)], work_dir=str(base / "work"), http={"enabled": False},
                      topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
                      read=read or {})
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    d.stop()
    return Tiered(logs, base / "work", tip, cfg, change)
