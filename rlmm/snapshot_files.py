"""Atomic, crash-safe files for fast metadata restart.

Per metadata partition, one snapshot file (the bytes of
:meth:`rlmm.cache.RemoteLogMetadataCache.to_snapshot_bytes`, which carry their own format
version and CRC), plus the committed-offsets file ``_rlmm_committed_offsets`` with one line
``<metadata-partition> <offset>`` per partition: the offset of the last record each snapshot
includes. Every write goes to a temporary file that is fsynced, renamed over the target and
followed by an fsync of the directory, so a crash leaves either the old or the new file, never
a mix. A malformed committed-offsets file raises :class:`~rlm.errors.MetadataDecodeError` so
the caller replays the topic instead of trusting it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rlm.errors import MetadataDecodeError

COMMITTED_OFFSETS_FILE = "_rlmm_committed_offsets"
SNAPSHOT_PREFIX = "remote_log_snapshot-"


def fsync_dir(directory: Path) -> None:
    """Makes a rename or create in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replaces ``path`` with ``data``: temp file + fsync + rename + fsync of the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def remove_stale_temp_files(directory: Path) -> None:
    """Deletes temp files a crash left behind (they were never renamed into place)."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for p in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def snapshot_path(directory: Path, metadata_partition: int) -> Path:
    return Path(directory) / f"{SNAPSHOT_PREFIX}{metadata_partition}"


def write_snapshot(directory: Path, metadata_partition: int, data: bytes) -> None:
    atomic_write(snapshot_path(directory, metadata_partition), data)


def read_snapshot(directory: Path, metadata_partition: int) -> bytes | None:
    """The snapshot's bytes, or ``None`` if there is none (validation is the cache's job)."""
    try:
        return snapshot_path(directory, metadata_partition).read_bytes()
    except FileNotFoundError:
        return None


def delete_snapshot(directory: Path, metadata_partition: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        snapshot_path(directory, metadata_partition).unlink()


def format_committed_offsets(offsets: Mapping[int, int]) -> bytes:
    return "".join(f"{p} {o}\n" for p, o in sorted(offsets.items())).encode()


def write_committed_offsets(directory: Path, offsets: Mapping[int, int]) -> None:
    atomic_write(Path(directory) / COMMITTED_OFFSETS_FILE, format_committed_offsets(offsets))


def parse_committed_offsets(text: bytes, source: str = COMMITTED_OFFSETS_FILE) -> dict[int, int]:
    """Parses ``<partition> <offset>`` lines; any malformed or repeated line is an error."""
    try:
        lines = text.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise MetadataDecodeError("not ASCII text", source=source) from None
    result: dict[int, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise MetadataDecodeError(f"line {lineno}: expected '<partition> <offset>', got {line!r}",
                                      source=source)
        partition, offset = int(parts[0]), int(parts[1])
        if partition < 0 or offset < -1:
            raise MetadataDecodeError(f"line {lineno}: negative partition or offset in {line!r}",
                                      source=source)
        if partition in result:
            raise MetadataDecodeError(f"line {lineno}: partition {partition} repeated", source=source)
        result[partition] = offset
    return result


def read_committed_offsets(directory: Path) -> dict[int, int]:
    """Metadata partition -> last offset covered by its snapshot; ``{}`` if the file is absent."""
    path = Path(directory) / COMMITTED_OFFSETS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    return parse_committed_offsets(data, source=str(path))
