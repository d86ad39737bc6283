"""Read-only file access shared by the index, snapshot and checkpoint readers.

A broker's partition directory changes under our feet: retention renames and unlinks
segments, the cleaner swaps them, truncation shortens the active one. These helpers never
write, never ``mmap`` (a concurrent truncation would raise SIGBUS), and turn a vanished
file into :class:`~rlm.errors.LogFileGoneError` so callers can treat the segment as gone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rlm.errors import LogFileGoneError, LogFormatError

SEGMENT_FILE_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex|snapshot)$")


def read_bytes(path: str | Path, *, limit: int | None = None) -> bytes:
    """The whole file (or its first ``limit`` bytes), opened read-only."""
    try:
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except FileNotFoundError as e:
        raise LogFileGoneError("file does not exist (deleted or renamed)", path=path, position=0) from e
    except OSError as e:
        raise LogFormatError(f"cannot read file: {e.strerror or e}", path=path, position=0) from e


def file_size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError as e:
        raise LogFileGoneError("file does not exist (deleted or renamed)", path=path, position=0) from e
    except OSError as e:
        raise LogFormatError(f"cannot stat file: {e.strerror or e}", path=path, position=0) from e


def offset_from_file_name(path: str | Path) -> int | None:
    """The base offset encoded in a ``%020d.<suffix>`` name, or None for other names."""
    m = SEGMENT_FILE_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name for a segment file: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}.{suffix}"
