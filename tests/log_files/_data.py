"""A realistic partition written with :class:`rlm.log.writer.PartitionWriter`, and what a
consumer must read back from it (used by the writer tests and the broker-load test)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from rlm.log.records import Compression, TimestampType
from rlm.log.writer import PartitionWriter, WriterConfig
from rlm.types import KafkaUuid

T0 = 1_700_000_000_000
INTERVAL = 1024
CODECS = list(Compression)
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


@dataclass
class Expected:
    """Data records in offset order: (offset, key, value, headers, timestamp, committed)."""

    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int, bool]] = \
        field(default_factory=list)
    open_txn_first_offset: int | None = None
    log_end_offset: int = 0

    def visible(self, *, read_committed: bool) -> list[tuple[int, bytes | None, bytes | None]]:
        stop = self.open_txn_first_offset if read_committed else None
        return [(o, k, v) for o, k, v, _h, _t, ok in self.records
                if (ok or not read_committed) and (stop is None or o < stop)]


class Clock:
    def __init__(self, start: int = T0, step: int = 3) -> None:
        self.now, self.step = start, step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def write_partition(directory: Path, *, topic_id: KafkaUuid | None = None, seed: int = 7,
                    batches: int = 260, segment_bytes: int = 64 * 1024, leave_open: bool = True,
                    epoch_change_at: int | None = 150,
                    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                    segment_ms: int = 7 * 24 * 3600 * 1000, leader_epoch: int = 0) -> Expected:
    """Every codec, headers, null keys/values, two idempotent producers, two transactional producers
    with interleaved commits and aborts, a segment of old timestamps (time not monotonic between
    segments), optionally a leader epoch change and a transaction left open at the end."""
    rnd = random.Random(seed)
    clock = Clock()
    cfg = WriterConfig(segment_bytes=segment_bytes, index_interval_bytes=INTERVAL,
                       message_timestamp_type=timestamp_type, segment_ms=segment_ms)
    exp = Expected()
    w = PartitionWriter(directory, topic_id=topic_id or KafkaUuid.random(), config=cfg, clock=clock,
                        leader_epoch=leader_epoch)
    open_txn: dict[int, list[int]] = {}  # pid -> indexes into exp.records

    def records(n: int, old: bool) -> list[Row]:
        out: list[Row] = []
        for j in range(n):
            key = None if rnd.random() < 0.1 else f"k{rnd.randrange(1000)}".encode()
            value = None if rnd.random() < 0.05 else rnd.randbytes(rnd.randint(0, 300))
            headers = [(f"h{i}", None if rnd.random() < 0.2 else rnd.randbytes(4))
                       for i in range(rnd.randint(0, 2))]
            ts = clock.now - (3_600_000 if old else 0) - rnd.randint(0, 2000) + j
            out.append((key, value, headers, ts))
        return out

    for i in range(batches):
        if i in (90, 110):  # batches 90..109 (old timestamps) fill a segment of their own
            w.roll()
        if epoch_change_at is not None and i == epoch_change_at:
            w.set_leader_epoch(w.leader_epoch + 3)
        recs = records(rnd.randint(1, 12), old=90 <= i < 110)
        codec = CODECS[i % len(CODECS)]
        kind = i % 7
        txn_pid = {3: 1000, 5: 1001}.get(kind)
        if txn_pid is not None:
            h = w.append(recs, compression=codec, producer_id=txn_pid, producer_epoch=2, transactional=True)
            open_txn.setdefault(txn_pid, [])
            pending = open_txn[txn_pid]
        elif kind == 1:
            h = w.append(recs, compression=codec, producer_id=2000 + i % 2, producer_epoch=0)
            pending = None
        else:
            h = w.append(recs, compression=codec)
            pending = None
        first = len(exp.records)
        for off, (k, v, hs, ts) in enumerate(recs, start=h.base_offset):
            eff_ts = h.max_timestamp if timestamp_type == TimestampType.LOG_APPEND_TIME else ts
            exp.records.append((off, k, v, hs, eff_ts, pending is None))
        if pending is not None:
            pending.extend(range(first, len(exp.records)))
        for pid in (1000, 1001):
            keep_open = (leave_open and i > batches - 20 and pid == 1000) or 90 <= i < 110  # markers: now
            if pid in open_txn and rnd.random() < 0.3 and not keep_open:
                commit = rnd.random() < 0.6
                w.end_transaction(pid, 2, commit=commit, coordinator_epoch=1)
                for idx in open_txn.pop(pid):
                    o, k, v, hs, ts, _ = exp.records[idx]
                    exp.records[idx] = (o, k, v, hs, ts, commit)
    for pid in list(open_txn):
        if leave_open and pid == 1000:
            exp.open_txn_first_offset = exp.records[open_txn[pid][0]][0]
            continue
        w.end_transaction(pid, 2, commit=True, coordinator_epoch=1)
        for idx in open_txn.pop(pid):
            o, k, v, hs, ts, _ = exp.records[idx]
            exp.records[idx] = (o, k, v, hs, ts, True)
    w.close()
    exp.log_end_offset = w.log_end_offset
    return exp
