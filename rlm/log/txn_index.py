"""Kafka's ``.txnindex`` file (``TransactionIndex``): the aborted transactions of a segment.

34-byte big-endian entries ``version int16 = 0 · producerId int64 · firstOffset int64 ·
lastOffset int64 · lastStableOffset int64``. An entry lives in the segment that holds the
ABORT marker (``lastOffset``); the transaction may have started in an earlier segment.
The file is append-only, never preallocated, and exists only when a segment has an abort.
Consumers in ``read_committed`` mode get these entries with every fetch to drop aborted data.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import IndexFormatError
from rlm.log._fileio import offset_from_file_name, read_bytes

ENTRY_SIZE = 34
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """One aborted transaction: data in [first_offset, last_offset), ABORT marker at last_offset.

    ``last_stable_offset`` is the partition's LSO right after the abort was written.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    out = bytearray()
    prev_last = -1
    for e in entries:
        if e.last_offset <= prev_last:
            raise ValueError(f"last offsets must strictly increase: {prev_last} then {e.last_offset}")
        out += _ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        prev_last = e.last_offset
    return bytes(out)


def parse_txn_index(data: bytes, *, base_offset: int | None = None,
                    path: str | Path | None = None) -> list[AbortedTxn]:
    """Parse ``.txnindex`` bytes; raises :class:`IndexFormatError` naming the byte position.

    Besides the layout this checks what Kafka's writer guarantees (version 0, producer id
    >= 0, first <= last offset, strictly increasing last offsets, LSO <= last offset + 1,
    last offset >= the segment base offset), so a damaged file is reported, not trusted.
    """
    where = str(path) if path is not None else None
    if len(data) % ENTRY_SIZE:
        raise IndexFormatError(f"file size {len(data)} is not a multiple of {ENTRY_SIZE} "
                               "(truncated or misaligned)",
                               path=where, position=len(data) - len(data) % ENTRY_SIZE)
    out: list[AbortedTxn] = []
    prev_last = -1
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        problem = None
        if version != VERSION:
            problem = f"unsupported aborted-transaction entry version {version}"
        elif pid < 0:
            problem = f"negative producer id {pid}"
        elif not 0 <= first <= last:
            problem = f"first offset {first} is not within [0, last offset {last}]"
        elif last <= prev_last:
            problem = f"last offset {last} does not increase (previous {prev_last})"
        elif not 0 <= lso <= last + 1:
            problem = f"last stable offset {lso} is not within [0, {last + 1}]"
        elif base_offset is not None and last < base_offset:
            problem = f"last offset {last} is below the segment base offset {base_offset}"
        if problem:
            raise IndexFormatError(problem, path=where, position=pos)
        out.append(AbortedTxn(pid, first, last, lso))
        prev_last = last
    return out


def read_txn_index(path: str | Path, base_offset: int | None = None) -> list[AbortedTxn]:
    """Read a ``.txnindex`` file read-only; ``base_offset`` defaults to the one in its file name."""
    if base_offset is None:
        base_offset = offset_from_file_name(path)
    return parse_txn_index(read_bytes(path), base_offset=base_offset, path=path)


def collect_aborted(entries: Iterable[AbortedTxn], fetch_offset: int,
                    upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: aborted transactions overlapping
    [fetch_offset, upper_bound_offset), and whether the search is complete (an entry's LSO
    reached the upper bound, so later segments cannot add more)."""
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
            found.append(e)
        if e.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False
