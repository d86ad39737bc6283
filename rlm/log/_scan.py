"""Batch walks over ``.log`` files of a live broker, without ``mmap``.

A memory map of a segment that the broker truncates (follower truncation, unclean leader
election) raises SIGBUS in the reading process, which would kill the daemon. So files of a
live partition directory are read with ``pread`` in bounded windows and handed to the
batch parser of :mod:`rlm.log.records` as bytes; positions and error positions are
translated back to file positions.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

from rlm.errors import LogFileGoneError, LogFormatError
from rlm.log.records import BatchHeader, iter_batches

WINDOW = 4 << 20
FIRST_WINDOW = 64 << 10
_MIN_HEADER = 17


class _File:
    """A read-only descriptor that maps "file vanished" to :class:`LogFileGoneError`."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise LogFileGoneError("file does not exist (deleted or renamed)", path=self.path,
                                   position=0) from e
        except OSError as e:
            raise LogFormatError(f"cannot open file: {e.strerror or e}", path=self.path, position=0) from e

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, n: int, pos: int) -> bytes:
        try:
            return os.pread(self.fd, n, pos)
        except OSError as e:
            raise LogFormatError(f"cannot read file: {e.strerror or e}", path=self.path, position=pos) from e

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> _File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shift(e: LogFormatError, by: int, path: str) -> LogFormatError:
    moved = type(e)(e.reason, path=path, position=(e.position or 0) + by)
    moved.__cause__ = e
    return moved


def scan_batches(path: str | Path, *, start_position: int = 0, end_position: int | None = None,
                 verify_crc: bool = True, window: int = WINDOW) -> Iterator[BatchHeader]:
    """Headers of every complete entry in [start_position, end_position) of a ``.log`` file.

    Like Java's ``FileLogInputStream``: stops silently at a partial tail (an entry running
    past the end), raises the parser's typed error on a corrupt entry (with its file position).
    Reads start small (a lookup usually needs one batch) and grow up to ``window`` bytes.
    """
    with _File(path) as f:
        limit = f.size() if end_position is None else min(end_position, f.size())
        pos = start_position
        step = min(FIRST_WINDOW, window)
        want = step
        while pos + _MIN_HEADER < limit:
            n = min(want, limit - pos)
            buf = f.pread(n, pos)
            if len(buf) < n:
                limit = pos + len(buf)
            end = pos
            try:
                for h in iter_batches(buf, path=f.path, verify_crc=verify_crc):
                    end = pos + h.end_position
                    yield dataclasses.replace(h, position=h.position + pos)
            except LogFormatError as e:
                raise _shift(e, pos, f.path) from e.__cause__
            if end == pos:
                size = int.from_bytes(buf[8:12], "big", signed=True) if len(buf) >= 12 else 0
                if 12 + size > n and pos + 12 + size <= limit:
                    want = 12 + size
                    continue
                return
            step = min(step * 2, window)
            pos, want = end, step


def read_entry(path: str | Path, header: BatchHeader) -> bytes:
    """The bytes of the entry ``header`` describes, re-read from the file."""
    with _File(path) as f:
        data = f.pread(header.size, header.position)
    if len(data) != header.size:
        raise LogFileGoneError(f"entry of {header.size} bytes is no longer complete (file truncated)",
                               path=str(path), position=header.position)
    return data


def header_at(path: str | Path, position: int, *, verify_crc: bool = True) -> BatchHeader | None:
    """The complete entry starting at ``position``, or None if there is none (end of file)."""
    for h in scan_batches(path, start_position=position, verify_crc=verify_crc):
        return h
    return None
