"""Write the compacted segment: ``.log`` plus offset, time and transaction indexes.

Why not :class:`rlm.log.PartitionWriter`: it plays the leader's append path (assigns offsets,
rolls segments, tracks producers from markers), while a cleaned segment keeps every batch's
offsets and is one file. Index entries follow ``LogSegment.append`` as the cleaner calls it for
its output (``Cleaner.cleanInto``): an offset-index entry (the batch's last offset, its position)
and a time-index entry (largest timestamp so far and its batch's last offset) whenever more
than ``index.interval.bytes`` were appended since the last entry, and the final time-index entry
when the segment becomes inactive. The ``.txnindex`` lists the aborted transactions the cleaner
re-indexes (their markers are still in the segment). No producer snapshot is written: the cleaner
keeps each active producer's last batch, so the snapshot of the last input segment's end offset
is still the right one for the compacted segment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rlm.log.offset_index import encode_offset_index
from rlm.log.records import iter_batches
from rlm.log.time_index import encode_time_index
from rlm.log.txn_index import AbortedTxn, encode_txn_index
from rlm.log.writer import atomic_write

__all__ = ["SegmentFiles", "write_segment"]


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """Paths of the written segment and what it holds."""

    log: Path
    offset_index: Path
    time_index: Path
    txn_index: Path | None
    base_offset: int
    size: int
    batches: int
    max_timestamp: int


def _name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}.{suffix}"


def write_segment(directory: str | Path, base_offset: int, batches: Iterable[bytes],
                  aborted: Iterable[AbortedTxn] = (), *, index_interval_bytes: int = 4096) -> SegmentFiles:
    """Write ``batches`` (complete v2 entries, offsets ascending) as segment ``base_offset``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    log_path = root / _name(base_offset, "log")
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    max_ts, offset_of_max = -1, base_offset
    since_index = position = count = 0
    tmp = Path(f"{log_path}.tmp")
    with open(tmp, "wb") as f:
        for batch in batches:
            header = next(iter_batches(batch, verify_crc=False))
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            if since_index > index_interval_bytes:
                offsets.append((header.last_offset, position))
                if not times or max_ts > times[-1][0]:
                    times.append((max_ts, offset_of_max))
                since_index = 0
            f.write(batch)
            since_index += len(batch)
            position += len(batch)
            count += 1
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, log_path)
    if max_ts >= 0 and (not times or max_ts > times[-1][0]):
        times.append((max_ts, offset_of_max))  # LogSegment.onBecomeInactiveSegment
    index_path = root / _name(base_offset, "index")
    time_path = root / _name(base_offset, "timeindex")
    atomic_write(index_path, encode_offset_index(offsets, base_offset))
    atomic_write(time_path, encode_time_index(times, base_offset))
    txns = sorted(aborted, key=lambda t: t.last_offset)  # marker order, as the broker appends them
    txn_path = None
    if txns:
        txn_path = root / _name(base_offset, "txnindex")
        atomic_write(txn_path, encode_txn_index(txns))
    return SegmentFiles(log_path, index_path, time_path, txn_path, base_offset, position, count, max_ts)
