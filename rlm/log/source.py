"""Turn the many things a caller may hand us (bytes, a path, an open file) into one byte view.

Files are *not* memory-mapped: a mapping does not survive the file being truncated underneath it
(the process gets SIGBUS and dies), and Kafka truncates live segments (follower catch-up, unclean
leader election, log recovery), as can an operator. Instead a file is read with ``pread`` into a
private anonymous mapping as large as the file, window by window as a reader advances
(:class:`FileWindow`), and windows already decoded are handed back to the kernel
(``MADV_DONTNEED``), so memory stays bounded by a window or two and positions stay absolute.
A file that shrinks while being read raises :class:`~rlm.errors.LogFileGoneError`. Open file
descriptors survive a rename or unlink of the file (retention, compaction).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Union

from rlm.errors import LogFileGoneError, LogFormatError
from rlm.log import _pages, _recycle

Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", IO[bytes]]


def source_name(source: object, path: str | os.PathLike[str] | None = None) -> str | None:
    """A name to put in error messages: the explicit ``path``, else the file's own name."""
    if path is not None:
        return os.fspath(path)
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else None


#: Bytes read ahead per ``pread`` window: large enough that the system call cost vanishes,
#: small enough that a streaming reader's memory stays bounded.
WINDOW = 32 * 1024 * 1024
_PAGE = mmap.PAGESIZE
_HUGE_PAGE = 2 * 1024 * 1024


class FileWindow:
    """A file's bytes at their absolute positions, read on demand with ``pread``.

    ``view`` spans the whole file (size taken at open); only ``[start, filled)`` holds file bytes.
    Readers call :meth:`ensure` before touching bytes and may :meth:`release` what they are done
    with. For bytes and in-memory sources :func:`open_window` gives a window that is already full.
    """

    def __init__(
        self,
        view: memoryview,
        *,
        fd: int = -1,
        mm: mmap.mmap | None = None,
        path: str | None = None,
        address: int = 0,
    ) -> None:
        self._buf = view  # writable for a file (``pread`` fills it), what the caller gave otherwise
        self.view = view.toreadonly()
        self.size = len(view)
        self.filled = self.size if fd < 0 else 0
        self._fd, self._mm, self._path, self._released = fd, mm, path, 0
        # Released pages kept for the next window (see :mod:`rlm.log._pages`): (offset, length).
        self._address = address if _pages.available() else 0
        self._spare: list[tuple[int, int]] = []

    def ensure(self, end: int) -> int:
        """Make ``[.., end)`` (clamped to the file size) readable; returns the new filled end.

        Reads at least :data:`WINDOW` bytes at a time. Raises :class:`LogFileGoneError` when
        the file is now shorter than it was at open (truncated while being read).
        """
        end = min(end, self.size)
        if end <= self.filled:
            return self.filled
        end = min(self.size, max(end, self.filled + WINDOW))
        if self._spare:
            self._recycle(self.filled, end)
        while self.filled < end:
            got = os.preadv(self._fd, [self._buf[self.filled : end]], self.filled)
            if got <= 0:
                now = os.fstat(self._fd).st_size
                raise LogFileGoneError(
                    f"file shrank to {now} bytes while being read (it had {self.size})",
                    path=self._path,
                    position=self.filled,
                )
            self.filled += got
        return self.filled

    def start_at(self, position: int) -> None:
        """Skip reading everything before ``position`` (a reader that starts mid-file)."""
        if self._fd >= 0 and self.filled < position:
            self.filled = min(position, self.size)
            self._released = self.filled // _PAGE * _PAGE

    def release(self, before: int) -> None:
        """Give back the memory of the pages entirely before ``before`` (they read as zeros after).

        Where pages can be moved, up to two windows of them are kept to hold the next windows'
        bytes instead (no fresh pages to fault in and zero); the rest is freed.
        """
        if self._mm is None:
            return
        cut = min(before, self.filled) // _PAGE * _PAGE
        if cut - self._released >= WINDOW // 2:
            kept = sum(n for _, n in self._spare)
            if self._address and kept < 2 * WINDOW:
                self._spare.append((self._released, cut - self._released))
            else:
                self._mm.madvise(mmap.MADV_DONTNEED, self._released, cut - self._released)
            self._released = cut

    def _recycle(self, start: int, end: int) -> None:
        """Move kept pages under the whole pages of ``[start, end)`` before they are read into."""
        assert self._mm is not None
        at, stop = -(-start // _PAGE) * _PAGE, end // _PAGE * _PAGE
        while self._spare and at < stop:
            offset, length = self._spare[0]
            n = min(length, stop - at)
            if not _pages.move(self._address + offset, self._address + at, n):
                for offset, length in self._spare:
                    self._mm.madvise(mmap.MADV_DONTNEED, offset, length)
                self._spare.clear()
                return
            at += n
            if n == length:
                self._spare.pop(0)
            else:
                self._spare[0] = (offset + n, length - n)

    def fill_all(self) -> memoryview:
        self.ensure(self.size)
        return self.view


@contextmanager
def open_window(source: Source, *, path: str | os.PathLike[str] | None = None) -> Iterator[FileWindow]:
    """Like :func:`open_source`, but a file is read lazily through a :class:`FileWindow`."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as f, _file_window(f, source_name(source, path)) as window:
            yield window
        return
    if not isinstance(source, bytes | bytearray | memoryview | io.BytesIO):
        fileno = getattr(source, "fileno", None)
        if fileno is not None:
            try:
                fileno()
            except (OSError, io.UnsupportedOperation):
                fileno = None
        if fileno is not None:
            with _file_window(source, source_name(source, path)) as window:
                yield window
            return
    with _open_memory(source, path=path) as view:
        yield FileWindow(view)


@contextmanager
def open_source(source: Source, *, path: str | os.PathLike[str] | None = None) -> Iterator[memoryview]:
    """Yield a read-only ``memoryview`` of the whole source (a file is read whole, see above).

    The view is valid only inside the ``with`` block; callers must not keep slices of it
    (copy what they return). A missing file raises :class:`FileNotFoundError` unchanged so callers
    can treat it as "gone" (segments are deleted underneath readers).
    """
    with open_window(source, path=path) as window:
        yield window.fill_all()


@contextmanager
def _open_memory(source: Source, *, path: str | os.PathLike[str] | None = None) -> Iterator[memoryview]:
    if isinstance(source, bytes | bytearray):
        yield memoryview(source).toreadonly()
        return
    if isinstance(source, memoryview):
        yield source.cast("B") if source.format != "B" or source.ndim != 1 else source
        return
    if isinstance(source, io.BytesIO):
        yield source.getbuffer().toreadonly()
        return
    read = getattr(source, "read", None)
    if read is None:
        raise TypeError(f"unsupported log source type {type(source).__name__}")
    data = read()
    if not isinstance(data, bytes | bytearray):
        raise LogFormatError("source is not a binary stream", path=source_name(source, path))
    yield memoryview(data).toreadonly()


@contextmanager
def _file_window(f: IO[bytes], name: str | None) -> Iterator[FileWindow]:
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        yield FileWindow(memoryview(b""))
        return
    # Large files: a recycled mapping (pages still mapped from an earlier read: no fault, no
    # zeroing; see _recycle.mapping), given back when the last view of it dies.
    pooled = _recycle.mapping(size)
    if pooled is not None:
        arr, mm, address = pooled
        view = memoryview(arr)[:size]
        window = FileWindow(view, fd=f.fileno(), mm=mm, path=name, address=address)
        try:
            yield window
        finally:
            _recycle.note_used(arr, size)
            with contextlib.suppress(BufferError):  # a caller kept a slice: it keeps the mapping
                window.view.release()
                view.release()
        return
    # Private and anonymous: pages cost nothing until filled, and MADV_DONTNEED really frees them.
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if size >= 2 * _HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        # 2 MiB pages: ~500x fewer page faults while filling, which is most of the cost of the copy.
        mm.madvise(mmap.MADV_HUGEPAGE)
    view = memoryview(mm)
    probe = ctypes.c_char.from_buffer(mm)
    address = ctypes.addressof(probe)
    del probe  # drop the buffer export, or the mapping could not be closed
    window = FileWindow(view, fd=f.fileno(), mm=mm, path=name, address=address)
    try:
        yield window
    finally:
        try:
            window.view.release()
            view.release()
            mm.close()
        except BufferError:  # a caller kept a slice; the memory is freed when that slice dies
            pass
