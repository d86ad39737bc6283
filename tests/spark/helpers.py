"""Shared helpers of the Spark source tests: a tiered standalone log dir and the expected rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from rlm.log.checkpoints import MetaProperties
from rlm.log.model import Compression, ControlRecord, ControlRecordType, Record
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_records
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, TopicIdPartition, TopicPartition
from tests.daemon.test_standalone import cfg_for, run_once

T0 = 1_700_000_000_000  # record timestamps (ms) are T0 + 10 * batch, with a few going backwards

Row = tuple[Any, ...]
_TOPIC_IDS: dict[str, KafkaUuid] = {}


def write_mixed(log_dir: Path, topic: str, partition: int, batches: int, *, seg_bytes: int = 64 * 1024,
                epoch_change_at: int | None = None, step_ms: int = 10) -> TopicIdPartition:
    """Plain, zstd, headers, committed and aborted transactions, explicit (non-monotonic) timestamps."""
    tid = _TOPIC_IDS.setdefault(topic, KafkaUuid.random())
    w = PartitionWriter(log_dir / f"{topic}-{partition}", topic_id=tid,
                        config=WriterConfig(segment_bytes=seg_bytes))
    for b in range(batches):
        if epoch_change_at is not None and b == epoch_change_at:
            w.set_leader_epoch(3)
        ts = T0 + step_ms * b - (25 if b % 7 == 6 else 0)
        hdrs: tuple[tuple[str, bytes | None], ...] = ()
        if b % 3 == 0:
            hdrs = (("h", f"{b}".encode()), ("n", None))
        recs = [(f"k{b}-{i}".encode(), f"v{b}-{i}-".encode() * 8, hdrs, ts) for i in range(20)]
        comp = Compression.ZSTD if b % 2 else Compression.NONE
        if b % 5 == 4:
            w.append(recs, compression=comp, producer_id=77, producer_epoch=0, transactional=True, now=ts)
            w.end_transaction(77, 0, commit=b % 15 != 14, now=ts)  # markers share the batch's time
        else:
            w.append(recs, compression=comp, producer_id=11 + partition, producer_epoch=0, now=ts)
    w.close()
    write_log_dir_files(log_dir, [(TopicPartition(topic, partition), w.log_end_offset)],
                        meta=MetaProperties(1, "standalone-cluster-0001", 1))
    return TopicIdPartition(tid, topic, partition)


def tier(root: Path, parts: list[tuple[str, int, int]], storage: dict[str, Any] | None = None,
         **kw: Any) -> Path:
    """Write and tier the partitions; returns the path of an ``rlm run`` config file for them."""
    logs = root / "logs"
    for topic, p, n in parts:
        write_mixed(logs, topic, p, n, **kw)
    extra = {"storage": storage} if storage else {}
    run_once(cfg_for(logs, root / "work", **extra))
    cf = root / "rlm.yaml"
    cf.write_text(yaml.safe_dump({"work_dir": str(root / "work"), **extra}))
    return cf


def expected_rows(log_dir: Path, topic: str, partition: int, *, committed: bool = False,
                  tiered_only: bool = True) -> list[Row]:
    """(key, value, topic, partition, offset, timestamp, timestampType, headers) of the local log,
    in Spark's Python form; the active segment is left out (never tiered) unless asked."""
    pdir = PartitionDir(log_dir / f"{topic}-{partition}")
    segs = pdir.inactive_segments() if tiered_only else pdir.segments()
    rows: list[tuple[int, Row]] = []
    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for seg in segs:
        for h, r in iter_records(seg.log_path):
            if isinstance(r, ControlRecord):
                offs = pending.pop(h.producer_id, [])
                if r.type == ControlRecordType.ABORT:
                    aborted.update(offs)
                continue
            assert isinstance(r, Record)
            if h.is_transactional:
                pending.setdefault(h.producer_id, []).append(r.offset)
            hdrs = [(k, v) for k, v in r.headers] or None
            rows.append((r.offset, (r.key, r.value, topic, partition, r.offset, r.timestamp,
                                    int(r.timestamp_type), hdrs)))
    return [row for off, row in rows if not (committed and off in aborted)]


def spark_ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch of a collected Spark timestamp (naive, in local time)."""
    return round(value.timestamp() * 1000)


def as_tuples(rows: list[Any], headers: bool = True) -> list[Row]:
    out = []
    for r in rows:
        t = (r.key, r.value, r.topic, r.partition, r.offset, spark_ms(r.timestamp), r.timestampType)
        if headers:
            t = (*t, [(h.key, h.value) for h in r.headers] if r.headers is not None else None)
        out.append(t)
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))
