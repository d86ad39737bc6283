"""The embedded store's append-only log: Kafka's serialized metadata records, each framed.

File layout: ``b"RLMMLOG1"`` then frames ``u32 length | u32 CRC-32C(payload) | payload`` (big
endian), where the payload is exactly the value :func:`rlmm.serde.serialize` produces for the
``__remote_log_metadata`` topic. Every append is followed by ``fdatasync``.

Crash safety: a crash can leave at most the last frame incomplete or garbled. On open, a bad
frame is treated as such a torn write — and truncated away, with a log line — only if it lies
within one maximum frame size of the end of the file *and* no valid frame starts anywhere after
it. Anything else is real corruption and raises :class:`~rlm.errors.MetadataDecodeError` naming
the file and byte position: records after a damaged one are never silently discarded.
Zero-length frames are bad frames (a file extended with zeros must not read as valid records).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import structlog

from rlm.errors import MetadataDecodeError, MetadataUnavailableError

log = structlog.get_logger(__name__)

LOG_FILE = "metadata.log"
MAGIC = b"RLMMLOG1"
FRAME = struct.Struct(">II")
MAX_PAYLOAD = 1 << 20
_SEARCH_BUDGET = 64 << 20  # bytes of CRC work spent looking for a valid frame after a bad one


class LogScan:
    """Iterates the good frames of a log from ``start``; afterwards ``end`` is where good data
    ends and ``torn_at`` the position of a torn last write (or ``None``)."""

    def __init__(self, path: Path, start: int = len(MAGIC)) -> None:
        self.path = Path(path)
        self.start = start
        self.end = start
        self.torn_at: int | None = None

    def _bad(self, mm: mmap.mmap, pos: int, size: int, reason: str) -> None:
        if size - pos <= FRAME.size + MAX_PAYLOAD and not _valid_frame_after(mm, pos + 1, size):
            self.torn_at = pos
            return
        raise MetadataDecodeError(f"corrupt frame ({reason}) followed by {size - pos} bytes that are not "
                                  "a torn last write", source=str(self.path), offset=pos)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            check_header(self.path, f.read(len(MAGIC)), size)
            if size <= self.start:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                pos = self.start
                while pos < size:
                    if size - pos < FRAME.size:
                        self._bad(mm, pos, size, "truncated frame header")
                        break
                    length, crc = FRAME.unpack_from(mm, pos)
                    if length == 0 or length > MAX_PAYLOAD:
                        self._bad(mm, pos, size, f"frame length {length}")
                        break
                    if pos + FRAME.size + length > size:
                        self._bad(mm, pos, size, "frame extends past the end of the file")
                        break
                    payload = mm[pos + FRAME.size:pos + FRAME.size + length]
                    if google_crc32c.value(payload) != crc:
                        self._bad(mm, pos, size, "CRC-32C mismatch")
                        break
                    yield pos, payload
                    pos += FRAME.size + length
                    self.end = pos


def _valid_frame_after(mm: mmap.mmap, start: int, size: int) -> bool:
    """Whether a complete, CRC-valid frame starts at any position in ``[start, size)``.

    Gives up (answering True, i.e. "not a torn write") past a CRC work budget, so a pathological
    tail costs bounded time and is reported rather than truncated.
    """
    budget = _SEARCH_BUDGET
    for p in range(start, size - FRAME.size):
        length, crc = FRAME.unpack_from(mm, p)
        if 0 < length <= MAX_PAYLOAD and p + FRAME.size + length <= size:
            budget -= length
            if budget < 0 or google_crc32c.value(mm[p + FRAME.size:p + FRAME.size + length]) == crc:
                return True
    return False


def check_header(path: Path, head: bytes, size: int) -> None:
    if size >= len(MAGIC) and head != MAGIC:
        raise MetadataDecodeError(f"not an rlmm metadata log (starts with {head!r})", source=str(path),
                                  offset=0)


class FrameLog:
    """The open log file: appends frames durably at a tracked end position."""

    def __init__(self, path: Path, end: int) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.end = end

    @classmethod
    def open(cls, path: Path, good_end: int | None) -> FrameLog:
        """Opens (creating if needed) and truncates everything after ``good_end``."""
        path = Path(path)
        created = not path.exists()
        fl = cls(path, len(MAGIC))
        size = os.fstat(fl.fd).st_size
        if size < len(MAGIC):  # new file, or a crash while writing the header
            os.ftruncate(fl.fd, 0)
            os.pwrite(fl.fd, MAGIC, 0)
            os.fsync(fl.fd)
            fl.end = len(MAGIC)
        else:
            fl.end = good_end if good_end is not None else size
            if fl.end < size:
                os.ftruncate(fl.fd, fl.end)
                os.fsync(fl.fd)
        if created:
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return fl

    def append(self, payload: bytes) -> None:
        """Writes one frame and fdatasyncs; on failure the file is cut back to the previous end."""
        if not payload or len(payload) > MAX_PAYLOAD:
            raise ValueError(f"record of {len(payload)} bytes cannot be framed (1..{MAX_PAYLOAD})")
        frame = FRAME.pack(len(payload), google_crc32c.value(payload)) + payload
        start = self.end
        try:
            written = 0
            while written < len(frame):
                written += os.pwrite(self.fd, frame[written:], start + written)
            os.fdatasync(self.fd)
        except OSError as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                log.error("rlmm_log_truncate_failed", path=str(self.path), position=start)
            raise MetadataUnavailableError(f"{self.path}: cannot append metadata record: {e}") from e
        self.end = start + len(frame)

    def close(self) -> None:
        os.close(self.fd)
