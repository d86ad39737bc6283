"""A scan's bytes: ranged GETs issued ahead of the decoder, in parallel, into reused buffers.

Why: a scan decodes chunk *n* while chunks *n+1*, *n+2*... are on the wire, so the decode and the
transfers overlap and the scan runs at the slower of the two instead of their sum. How far ahead is
the bandwidth-delay product of the decoder and the store (:mod:`fetcher.read_ahead_depth`): enough
chunks to cover the shortest GET time at the decoder's rate, within the read-ahead budget
(``read.read_ahead_bytes``): a store far away gets more GETs in parallel, a store that is its own
bound no GETs that only queue in it and take CPU from the decoder. Chunks are received with
``readinto`` straight into preallocated buffers (:mod:`fetcher.chunk_buffers`) when the plugin can
(``read_log_segment_range_into``) and handed to the decoder as read-only views of those buffers:
the bytes are copied once, from the socket, and a buffer is reused only once nobody sees it. A
batch that straddles two chunks is the one copy left (a join of its two parts).

The sequence is the scan's whole list of extents (byte ranges of consecutive segments), so the
read-ahead runs on into the next segment. Closing (a scan stopped early, an error) cancels the GETs
still queued, waits for the running ones, and frees every buffer.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fetcher.chunk_buffers import ChunkBufferPool
from fetcher.get_pool import GetJob, Priority
from fetcher.read_ahead_depth import ReadAheadDepth
from rlm.types import RemoteLogSegmentMetadata


class SegmentReader(Protocol):
    """What a read-ahead needs of :class:`fetcher.reader.SegmentReader` (which makes one: this
    module does not import it back)."""

    rsm: Any
    chunk_bytes: int

    def read_view(self, md: RemoteLogSegmentMetadata, start: int, end: int, *,
                  next_md: RemoteLogSegmentMetadata | None = None) -> memoryview: ...

    def submit_get(self, fn: Callable[[], Any], priority: Priority) -> GetJob: ...

    def promote_get(self, job: GetJob) -> None: ...

    def get_range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes: ...

    def get_range_into(self, md: RemoteLogSegmentMetadata, start: int, end: int, out: memoryview) -> None: ...


@dataclass(frozen=True, slots=True)
class Extent:
    """Bytes ``[start, stop)`` of one segment that a scan will read, in scan order."""

    md: RemoteLogSegmentMetadata
    start: int
    stop: int


@dataclass(eq=False)
class _Slot:
    """One chunk of the sequence: its GET and the buffer it is received into."""

    order: tuple[int, int]  # (extent number, chunk index): the sequence order
    md: RemoteLogSegmentMetadata
    index: int
    buf: bytearray | None
    job: GetJob = field(init=False)  # submitted once the slot exists (its GET fills the slot)
    data: memoryview | None = None  # the received bytes (read-only), once done
    get_s: float = 0.0  # the GET's time from its start to its last byte (a full chunk's only)
    got_at: float = 0.0  # when the decoder had it
    view: memoryview | None = field(default=None, repr=False)  # our own view of buf


class SequentialRead:
    """The chunks of ``extents`` in order, fetched ahead. One consumer thread; not reentrant."""

    def __init__(self, reader: SegmentReader, extents: Sequence[Extent], budget_bytes: int) -> None:
        self.reader = reader
        self.chunk = reader.chunk_bytes
        # two at least: a batch that straddles two chunks is read from both
        self.pool = ChunkBufferPool(self.chunk, max(2, budget_bytes // self.chunk))
        self.read_ahead = budget_bytes >= self.chunk
        self._extent_no = {str(e.md.remote_log_segment_id.id): i for i, e in enumerate(extents)}
        self._todo = self._sequence(extents)
        self._pending: tuple[int, int, RemoteLogSegmentMetadata] | None = None
        self._window: deque[_Slot] = deque()
        self.depth_control = ReadAheadDepth(self.pool.max_buffers) if self.read_ahead else None
        self._into = getattr(reader.rsm, "read_log_segment_range_into", None)
        self._closed = False
        self.gets = 0

    def _sequence(self, extents: Sequence[Extent]) -> Iterator[tuple[int, int, RemoteLogSegmentMetadata]]:
        for n, e in enumerate(extents):
            if e.start < e.stop:
                for i in range(e.start // self.chunk, (e.stop - 1) // self.chunk + 1):
                    yield n, i, e.md

    # ---- what the decoder calls ------------------------------------------------------------
    def view(self, md: RemoteLogSegmentMetadata, start: int, stop: int) -> memoryview:
        """Bytes ``[start, stop)`` of ``md`` (clamped to its size), read-only. Within one chunk of
        the sequence: a view of its buffer, valid until :meth:`release_before` passes it; across
        two: a copy of just these bytes; outside the sequence: the reader's demand path."""
        stop = min(stop, md.segment_size_in_bytes)
        if start >= stop:
            return memoryview(b"")
        first, last = start // self.chunk, (stop - 1) // self.chunk
        self._fill(upto=(self._extent_no.get(str(md.remote_log_segment_id.id), -1), last))
        slots = [self._find(md, i) for i in range(first, last + 1)]
        if any(s is None for s in slots):
            return self.reader.read_view(md, start, stop)
        parts = [self._wait(s) for s in slots if s is not None]
        base = first * self.chunk
        if len(parts) == 1:
            return parts[0][start - base:stop - base]
        parts[0], parts[-1] = parts[0][start - base:], parts[-1][:stop - last * self.chunk]
        return memoryview(b"".join(parts))

    def release_before(self, md: RemoteLogSegmentMetadata, position: int) -> None:
        """The decoder is past ``position`` of ``md``: chunks before it are given back (the
        decoder must hold no view of them any more) and the read-ahead moves on."""
        at = (self._extent_no.get(str(md.remote_log_segment_id.id), -1), position // self.chunk)
        while self._window and self._window[0].order < at:
            slot = self._window.popleft()
            if self.depth_control is not None:
                if slot.get_s:
                    self.depth_control.got(slot.get_s)
                if slot.got_at:
                    self.depth_control.used(time.monotonic() - slot.got_at)
            self._free(slot)
        self._fill()

    def close(self) -> None:
        """Cancel queued GETs, wait for running ones, free every buffer."""
        if self._closed:
            return
        self._closed = True
        for slot in self._window:  # first every queued GET, so that none starts while we wait
            slot.job.future.cancel()
        while self._window:
            self._free(self._window.popleft())
        self.pool.clear()

    @property
    def depth(self) -> int:
        """Chunks to keep in the window (the one being decoded included): 1 without read-ahead,
        else the product :class:`~fetcher.read_ahead_depth.ReadAheadDepth` measured."""
        return 1 if self.depth_control is None else self.depth_control.depth

    @property
    def in_flight(self) -> int:
        """GETs of this scan queued or running (tests: none after :meth:`close`)."""
        return sum(1 for s in self._window if not s.job.future.done())

    # ---- the window ------------------------------------------------------------------------
    def _find(self, md: RemoteLogSegmentMetadata, index: int) -> _Slot | None:
        sid = md.remote_log_segment_id.id
        for s in self._window:
            if s.index == index and s.md.remote_log_segment_id.id == sid:
                return s
        return None

    def _fill(self, upto: tuple[int, int] | None = None) -> None:
        """Keep :attr:`depth` chunks in flight; past it, within the budget, up to chunk ``upto`` (a
        window wider than one chunk: every chunk of it comes from the sequence, once)."""
        while not self._closed:
            nxt = self._pending or next(self._todo, None)
            if nxt is None:
                return
            if len(self._window) >= self.depth and (upto is None or nxt[:2] > upto):
                self._pending = nxt
                return
            buf = None
            if self._into is not None:
                buf = self.pool.take()
                if buf is None:  # the budget is out (buffers retired by the guard): wait
                    self._pending = nxt
                    return
            self._pending = None
            n, index, md = nxt
            slot = _Slot((n, index), md, index, buf)
            slot.job = self.reader.submit_get(functools.partial(self._receive, slot), Priority.READ_AHEAD)
            self._window.append(slot)
            self.gets += 1

    def _receive(self, slot: _Slot) -> None:
        """On a GET worker: the chunk's bytes into the slot's buffer (or a ``bytes``)."""
        t0 = time.monotonic()
        start = slot.index * self.chunk
        stop = min(start + self.chunk, slot.md.segment_size_in_bytes)
        if slot.buf is not None:
            slot.view = memoryview(slot.buf)
            self.reader.get_range_into(slot.md, start, stop, slot.view[:stop - start])
            slot.data = slot.view.toreadonly()[:stop - start]
        else:
            slot.data = memoryview(self.reader.get_range(slot.md, start, stop))
        if stop - start == self.chunk:  # a short tail chunk would understate a GET's time
            slot.get_s = time.monotonic() - t0

    def _wait(self, slot: _Slot) -> memoryview:
        if not slot.job.started:
            self.reader.promote_get(slot.job)
        slot.job.future.result()
        if not slot.got_at:
            slot.got_at = time.monotonic()
        assert slot.data is not None
        return slot.data

    def _free(self, slot: _Slot) -> None:
        """Cancel or finish the slot's GET, drop our views of its buffer, give the buffer back."""
        fut = slot.job.future
        if not fut.cancel() and not fut.done():
            # running: wait for it; its error, if any, is the scan's no longer
            fut.exception()
        slot.data = None
        if slot.view is not None:
            slot.view.release()
            slot.view = None
        if slot.buf is not None:
            self.pool.give_back(slot.buf)
            slot.buf = None
