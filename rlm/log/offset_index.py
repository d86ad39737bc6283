"""Kafka's ``.index`` file (``OffsetIndex``): sparse offset → byte position map of a segment.

Each 8-byte big-endian entry is ``relativeOffset int32 · position int32``: the **last**
offset of the batch that starts at ``position`` in the ``.log``, relative to the segment's
base offset. Entries strictly increase in both fields. There is no header and no checksum.

The active segment's index is preallocated with zeros by the broker (10 MiB by default), so
a reader stops at the first all-zero slot after entry 0, as ``DumpLogSegments`` does. After a
truncation the broker re-extends the file without zeroing it, so the active segment's file
can also hold stale entries after the valid ones; ``stale_tail_ok=True`` stops at the first
non-increasing entry instead of calling it corrupt. Rolled segments' files are trimmed to
exactly ``entries * 8`` bytes, which :func:`encode_offset_index` produces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rlm.errors import IndexFormatError
from rlm.log._fileio import offset_from_file_name, read_bytes

ENTRY_SIZE = 8
INT32_MAX = 2**31 - 1
_DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An index entry with an absolute offset: the batch at ``position`` ends at ``offset``."""

    offset: int
    position: int


class OffsetIndex:
    """A parsed offset index; ``offsets`` and ``positions`` are int64 arrays (absolute offsets)."""

    __slots__ = ("base_offset", "offsets", "path", "positions")

    def __init__(self, base_offset: int, offsets: npt.NDArray[np.int64], positions: npt.NDArray[np.int64],
                 path: str | None = None) -> None:
        self.base_offset = base_offset
        self.offsets = offsets
        self.positions = positions
        self.path = path

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        return f"OffsetIndex(base_offset={self.base_offset}, entries={len(self)}, path={self.path!r})"

    def entries(self) -> list[OffsetPosition]:
        return [OffsetPosition(int(o), int(p)) for o, p in zip(self.offsets, self.positions, strict=True)]

    @property
    def last_offset(self) -> int:
        """Kafka's ``OffsetIndex.lastOffset``: the last entry's offset, or the base offset if empty."""
        return int(self.offsets[-1]) if len(self.offsets) else self.base_offset

    def lookup(self, target: int) -> OffsetPosition:
        """Largest entry with offset <= ``target``, or ``(base_offset, 0)`` (``OffsetIndex.lookup``).

        The batch containing ``target`` starts at or after the returned position.
        """
        i = int(np.searchsorted(self.offsets, target, side="right")) - 1
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(int(self.offsets[i]), int(self.positions[i]))

    def to_bytes(self) -> bytes:
        return encode_offset_index(zip(self.offsets.tolist(), self.positions.tolist(), strict=True),
                                   self.base_offset)


def encode_offset_index(entries: Iterable[tuple[int, int]], base_offset: int) -> bytes:
    """A trimmed ``.index`` for (absolute offset, position) pairs, validated like Kafka's ``append``."""
    rows = list(entries)
    arr = np.zeros(len(rows), dtype=_DTYPE)
    prev_off, prev_pos = -1, -1
    for i, (off, pos) in enumerate(rows):
        rel = off - base_offset
        if not 0 <= rel <= INT32_MAX or not 0 <= pos <= INT32_MAX:
            raise ValueError(f"index entry ({off}, {pos}) out of range for base offset {base_offset}")
        if i and (off <= prev_off or pos <= prev_pos):
            raise ValueError(f"index entries must strictly increase: ({prev_off}, {prev_pos}) "
                             f"then ({off}, {pos})")
        arr[i] = (rel, pos)
        prev_off, prev_pos = off, pos
    return arr.tobytes()


def parse_offset_index(data: bytes, base_offset: int, *, path: str | Path | None = None,
                       stale_tail_ok: bool = False) -> OffsetIndex:
    """Parse ``.index`` bytes; raises :class:`IndexFormatError` naming the byte position."""
    where = str(path) if path is not None else None
    if len(data) % ENTRY_SIZE:
        raise IndexFormatError(f"file size {len(data)} is not a multiple of {ENTRY_SIZE} "
                               "(truncated or misaligned)",
                               path=where, position=len(data) - len(data) % ENTRY_SIZE)
    raw = np.frombuffer(data, dtype=_DTYPE)
    rel = raw["rel"].astype(np.int64)
    pos = raw["pos"].astype(np.int64)
    zero = (rel == 0) & (pos == 0)
    zero_at = np.flatnonzero(zero)
    n = int(zero_at[0]) if len(zero_at) else len(raw)
    if n < len(raw) and not stale_tail_ok and raw[n:].view(np.uint8).any():
        bad = n + int(np.flatnonzero(~zero[n:])[0])
        raise IndexFormatError(f"non-zero entry after the zero-filled tail at entry {n}",
                               path=where, position=bad * ENTRY_SIZE)
    rel, pos = rel[:n], pos[:n]
    neg = np.flatnonzero((rel < 0) | (pos < 0))
    bad_order = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(pos) <= 0)) + 1
    first_bad = min([int(x[0]) for x in (neg, bad_order) if len(x)], default=None)
    if first_bad is not None:
        if stale_tail_ok and first_bad > 0:
            rel, pos = rel[:first_bad], pos[:first_bad]
        else:
            r, p = int(rel[first_bad]), int(pos[first_bad])
            reason = (f"entry {first_bad} (relative offset {r}, position {p}) is negative" if r < 0 or p < 0
                      else f"entry {first_bad} (relative offset {r}, position {p}) does not increase")
            raise IndexFormatError(reason, path=where, position=first_bad * ENTRY_SIZE)
    return OffsetIndex(base_offset, rel + base_offset, pos, where)


def read_offset_index(path: str | Path, base_offset: int | None = None, *,
                      stale_tail_ok: bool = False) -> OffsetIndex:
    """Read a ``.index`` file read-only; ``base_offset`` defaults to the one in its file name."""
    if base_offset is None:
        base_offset = offset_from_file_name(path)
        if base_offset is None:
            raise IndexFormatError("cannot tell the base offset from the file name", path=path, position=0)
    return parse_offset_index(read_bytes(path), base_offset, path=path, stale_tail_ok=stale_tail_ok)
