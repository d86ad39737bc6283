"""Turn the many things a caller may hand us (bytes, a path, an open file) into one byte view.

Files are memory-mapped read-only, so walking a 1 GiB segment touches only the pages that are
read and never copies the file. Open file descriptors survive a rename or unlink of the file
(retention, compaction), which is what a reader of a live broker directory needs. A mapping does
not survive the file being *truncated* underneath it (the process gets SIGBUS), which Kafka does
only to a segment holding offsets above the high watermark (follower catch-up, unclean leader
election): readers of such ranges of a live active segment should pass bytes read with ``pread``
(as ``rlm.log``'s segment scanner does) rather than the path. Remote segment files never change.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Union

from rlm.errors import LogFormatError

Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", IO[bytes]]


def source_name(source: object, path: str | os.PathLike[str] | None = None) -> str | None:
    """A name to put in error messages: the explicit ``path``, else the file's own name."""
    if path is not None:
        return os.fspath(path)
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else None


@contextmanager
def open_source(source: Source, *, path: str | os.PathLike[str] | None = None) -> Iterator[memoryview]:
    """Yield a read-only ``memoryview`` of the whole source.

    The view is valid only inside the ``with`` block; callers must not keep slices of it
    (copy what they return). A missing file raises :class:`FileNotFoundError` unchanged so callers
    can treat it as "gone" (segments are deleted underneath readers).
    """
    if isinstance(source, bytes | bytearray):
        yield memoryview(source).toreadonly()
        return
    if isinstance(source, memoryview):
        yield source.cast("B") if source.format != "B" or source.ndim != 1 else source
        return
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as f, _map_file(f) as view:
            yield view
        return
    if isinstance(source, io.BytesIO):
        yield source.getbuffer().toreadonly()
        return
    fileno = getattr(source, "fileno", None)
    if fileno is not None:
        try:
            fileno()
        except (OSError, io.UnsupportedOperation):
            fileno = None
    if fileno is not None:
        with _map_file(source) as view:
            yield view
        return
    read = getattr(source, "read", None)
    if read is None:
        raise TypeError(f"unsupported log source type {type(source).__name__}")
    data = read()
    if not isinstance(data, bytes | bytearray):
        raise LogFormatError("source is not a binary stream", path=source_name(source, path))
    yield memoryview(data).toreadonly()


@contextmanager
def _map_file(f: IO[bytes]) -> Iterator[memoryview]:
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        yield memoryview(b"")
        return
    mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    try:
        yield view
    finally:
        try:
            view.release()
            mm.close()
        except BufferError:  # a caller kept a slice; the map is freed when that slice dies
            pass
