"""Kafka's ``.timeindex`` file (``TimeIndex``): sparse max-timestamp → offset map of a segment.

Each 12-byte big-endian entry is ``timestamp int64 · relativeOffset int32``. Entry (T, O)
means: the largest record timestamp in the segment up to and including the batch whose last
offset is O is T, and O's batch is the earliest that reached T. Timestamps strictly increase
and offsets never decrease within a file, but not across files (CreateTime can go back).

Closed segments end with the "roll entry" (segment max timestamp, offset of its earliest
batch) and are trimmed. The active segment's file has a zero tail (preallocation) and, after
a truncation, possibly stale entries; see :mod:`rlm.log.offset_index` for ``stale_tail_ok``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rlm.errors import IndexFormatError
from rlm.log._fileio import offset_from_file_name, read_bytes

ENTRY_SIZE = 12
INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1
_DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time-index entry with an absolute offset."""

    timestamp: int
    offset: int


class TimeIndex:
    """A parsed time index; ``timestamps`` and ``offsets`` are int64 arrays (absolute offsets)."""

    __slots__ = ("base_offset", "offsets", "path", "timestamps")

    def __init__(self, base_offset: int, timestamps: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64],
                 path: str | None = None) -> None:
        self.base_offset = base_offset
        self.timestamps = timestamps
        self.offsets = offsets
        self.path = path

    def __len__(self) -> int:
        return len(self.timestamps)

    def __repr__(self) -> str:
        return f"TimeIndex(base_offset={self.base_offset}, entries={len(self)}, path={self.path!r})"

    def entries(self) -> list[TimestampOffset]:
        return [TimestampOffset(int(t), int(o)) for t, o in zip(self.timestamps, self.offsets, strict=True)]

    @property
    def last_entry(self) -> TimestampOffset:
        """Kafka's ``TimeIndex.lastEntry``: the last entry, or ``(-1, base_offset)`` if empty."""
        if not len(self.timestamps):
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(int(self.timestamps[-1]), int(self.offsets[-1]))

    def lookup(self, timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= ``timestamp``, or ``(-1, base_offset)`` (``TimeIndex.lookup``)."""
        i = int(np.searchsorted(self.timestamps, timestamp, side="right")) - 1
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(int(self.timestamps[i]), int(self.offsets[i]))

    def to_bytes(self) -> bytes:
        return encode_time_index(zip(self.timestamps.tolist(), self.offsets.tolist(), strict=True),
                                 self.base_offset)


def encode_time_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """A trimmed ``.timeindex`` for (timestamp, absolute offset) pairs, validated like Kafka's."""
    rows = list(entries)
    arr = np.zeros(len(rows), dtype=_DTYPE)
    prev_ts, prev_off = NO_TIMESTAMP, base_offset
    for i, (ts, off) in enumerate(rows):
        rel = off - base_offset
        if not 0 <= rel <= INT32_MAX:
            raise ValueError(f"time index offset {off} out of range for base offset {base_offset}")
        if ts <= prev_ts or off < prev_off:
            raise ValueError(f"time index entries must increase: ({prev_ts}, {prev_off}) then ({ts}, {off})")
        arr[i] = (ts, rel)
        prev_ts, prev_off = ts, off
    return arr.tobytes()


def parse_time_index(data: bytes, base_offset: int, *, path: str | Path | None = None,
                     stale_tail_ok: bool = False) -> TimeIndex:
    """Parse ``.timeindex`` bytes; raises :class:`IndexFormatError` naming the byte position."""
    where = str(path) if path is not None else None
    if len(data) % ENTRY_SIZE:
        raise IndexFormatError(f"file size {len(data)} is not a multiple of {ENTRY_SIZE} "
                               "(truncated or misaligned)",
                               path=where, position=len(data) - len(data) % ENTRY_SIZE)
    raw = np.frombuffer(data, dtype=_DTYPE)
    ts = raw["ts"].astype(np.int64)
    rel = raw["rel"].astype(np.int64)
    zero = (ts == 0) & (rel == 0)
    zero_at = np.flatnonzero(zero)
    n = int(zero_at[0]) if len(zero_at) else len(raw)
    if n < len(raw) and not stale_tail_ok and raw[n:].view(np.uint8).any():
        bad = n + int(np.flatnonzero(~zero[n:])[0])
        raise IndexFormatError(f"non-zero entry after the zero-filled tail at entry {n}",
                               path=where, position=bad * ENTRY_SIZE)
    ts, rel = ts[:n], rel[:n]
    neg = np.flatnonzero((ts < 0) | (rel < 0))
    bad_order = np.flatnonzero((np.diff(ts) <= 0) | (np.diff(rel) < 0)) + 1
    first_bad = min([int(x[0]) for x in (neg, bad_order) if len(x)], default=None)
    if first_bad is not None:
        if stale_tail_ok and first_bad > 0:
            ts, rel = ts[:first_bad], rel[:first_bad]
        else:
            t, r = int(ts[first_bad]), int(rel[first_bad])
            reason = (f"entry {first_bad} (timestamp {t}, relative offset {r}) is negative" if t < 0 or r < 0
                      else f"entry {first_bad} (timestamp {t}, relative offset {r}) is out of order")
            raise IndexFormatError(reason, path=where, position=first_bad * ENTRY_SIZE)
    return TimeIndex(base_offset, ts, rel + base_offset, where)


def read_time_index(path: str | Path, base_offset: int | None = None, *,
                    stale_tail_ok: bool = False) -> TimeIndex:
    """Read a ``.timeindex`` file read-only; ``base_offset`` defaults to the one in its file name."""
    if base_offset is None:
        base_offset = offset_from_file_name(path)
        if base_offset is None:
            raise IndexFormatError("cannot tell the base offset from the file name", path=path, position=0)
    return parse_time_index(read_bytes(path), base_offset, path=path, stale_tail_ok=stale_tail_ok)
