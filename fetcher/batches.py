"""Walking record batches in remote segment bytes, window by window.

A remote segment is never read whole: the walker pulls windows of bytes through the
:class:`~fetcher.reader.SegmentReader` and yields batch headers with their absolute positions
in the segment. A batch that runs past the segment's size is :class:`RemoteSegmentIncompleteError`
— a read is complete or it is an error. Reaching the segment's end before its recorded end offset
is not: the broker's log cleaner removes records at a segment's end (compacted topics), and the
recorded end offset is the next segment's base - 1, as Kafka records it; a read that finds no
batch at or after its offset falls through to the next segment, as Kafka's does (KAFKA-15388).
Bytes missing from an object are caught by the size checks of :mod:`fetcher.reader`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from fetcher.reader import SegmentReader
from rlm.errors import LogFormatError, RemoteSegmentIncompleteError
from rlm.log.records import BatchHeader, iter_batches
from rlm.types import RemoteLogSegmentMetadata

_MIN_WINDOW = 64 * 1024
_LENGTH_PREFIX = 12  # a batch's base offset (8 bytes) and length (4): its size is 12 + length


@dataclass(frozen=True, slots=True)
class Located:
    """A batch header (absolute ``position`` in the segment) and its bytes."""

    header: BatchHeader
    #: a view into the window read (no copy per batch; a consumer of many batches copies once)
    data: memoryview
    #: the window ``data`` is a slice of, and where in it: consecutive batches of one window are
    #: one slice (:func:`contiguous`)
    window: memoryview | None = None
    start: int = 0


@dataclass(slots=True)
class WalkLimit:
    """Where the walker's caller stops taking batches (segment position), set once it knows.

    A fetch takes batches up to its byte limit; the batch that would cross it is not returned.
    When that batch also crosses the end of a cached chunk, reading it means waiting for the next
    chunk's GET (8 MiB) only to learn its size: with ``end`` set, the walker reads the batch's
    12-byte length prefix from the chunk it has and stops before a batch ending past ``end``.
    """

    end: int | None = None


def contiguous(batches: list[Located]) -> list[memoryview]:
    """The batches' bytes as few views as possible: runs of consecutive batches of one window
    become one slice of it (a socket write per run, not per batch)."""
    out: list[memoryview] = []
    run: Located | None = None
    end = 0
    for b in batches:
        if run is not None and b.window is not None and b.window is run.window and b.start == end:
            end = b.start + len(b.data)
            continue
        if run is not None:
            out.append(run.window[run.start:end] if run.window is not None else run.data)
        run, end = b, b.start + len(b.data)
    if run is not None:
        out.append(run.window[run.start:end] if run.window is not None else run.data)
    return out


def describe(md: RemoteLogSegmentMetadata) -> str:
    tp = md.topic_id_partition
    return (f"{tp.topic}-{tp.partition} segment {md.remote_log_segment_id.id} "
            f"(offsets {md.start_offset}..{md.end_offset})")


def walk(reader: SegmentReader, md: RemoteLogSegmentMetadata, start_position: int, *,
         window: int, sequential: bool, next_md: RemoteLogSegmentMetadata | None = None,
         verify_crc: bool = False, limit: WalkLimit | None = None) -> Iterator[Located]:
    """Yield whole batches from ``start_position`` to the end of the segment, reading windows of
    about ``window`` bytes (grown when one batch is larger); with ``limit``, stop early (no
    completeness check then) at a batch across a chunk's end that ends past ``limit.end``."""
    size = md.segment_size_in_bytes
    pos = start_position
    want = max(window, _MIN_WINDOW)
    straddle = _MIN_WINDOW
    last: BatchHeader | None = None
    while pos < size:
        end = min(size, pos + want)
        if sequential:
            # stop at the end of the cached chunk: the window is then a view of the chunk itself
            # (no copy); only a window across a chunk boundary is copied, kept small (the batches
            # that straddle it), so a consumer's records are copied once, into its answer
            chunk_end = (pos // reader.chunk_bytes + 1) * reader.chunk_bytes
            end = min(end, max(chunk_end, pos + straddle))
            if limit is not None and limit.end is not None and end > chunk_end >= pos + _LENGTH_PREFIX:
                prefix = reader.read_view(md, pos, pos + _LENGTH_PREFIX, next_md=next_md)
                if pos + _LENGTH_PREFIX + int.from_bytes(prefix[8:12], "big", signed=True) > limit.end:
                    return  # the caller would not take it: the next chunk is not waited for
            view = reader.read_view(md, pos, end, next_md=next_md)
            data: bytes | memoryview = view
        else:
            data = reader.read(md, pos, end, sequential=False)
            view = memoryview(data)
        consumed = 0
        try:
            for h in iter_batches(data, verify_crc=verify_crc, path=describe(md)):
                abs_h = replace(h, position=h.position + pos)
                yield Located(abs_h, view[h.position:h.end_position], view, h.position)
                consumed = h.end_position
                last = abs_h
        except LogFormatError as e:
            raise type(e)(f"{e.reason} (at segment position {pos + (e.position or 0)})",
                          path=describe(md), position=pos + (e.position or 0)) from e
        if consumed == 0:
            if pos + len(data) >= size:
                raise RemoteSegmentIncompleteError(
                    f"{describe(md)}: a batch at position {pos} runs past the segment's {size} bytes")
            want *= 4  # one batch larger than the window (or across a chunk's end)
            straddle *= 4
            continue
        pos += consumed
        want = max(window, _MIN_WINDOW)
        straddle = _MIN_WINDOW
    if last is not None and last.last_offset > md.end_offset:
        raise RemoteSegmentIncompleteError(
            f"{describe(md)}: the segment's bytes reach offset {last.last_offset}, past its recorded end "
            f"offset {md.end_offset}")


def check_complete(md: RemoteLogSegmentMetadata, last: BatchHeader | None) -> None:
    """At the end of a segment: the last batch ends at the segment's recorded size, at or below its
    recorded end offset (below it when the broker's cleaner removed the segment's last records)."""
    if last is None or last.last_offset > md.end_offset or last.end_position != md.segment_size_in_bytes:
        got = f"offset {last.last_offset} at byte {last.end_position}" if last else "no batch"
        raise RemoteSegmentIncompleteError(
            f"{describe(md)}: bytes end with {got}, but metadata says offset {md.end_offset} at byte "
            f"{md.segment_size_in_bytes}")
