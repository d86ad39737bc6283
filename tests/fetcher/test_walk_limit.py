"""A fetch's walk stops before a batch it will not take without waiting for the next chunk.

Kafka-sized chunks (8 MiB) make this matter: the batch after a fetch's last one often crosses a
chunk's end, and reading it whole meant waiting for the next chunk's GET only to learn that it
does not fit. The walker reads its 12-byte length prefix from the chunk it has instead.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from fetcher.batches import WalkLimit, walk
from rlm.log.encode import encode_batch
from rlm.log.records import iter_batches

CHUNK = 128 * 1024  # larger than the walker's 64 KiB minimum window, as real chunks are


class ChunkReader:
    """A SegmentReader's ``read_view`` over bytes in memory, recording which chunks were touched."""

    chunk_bytes = CHUNK

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.chunks: set[int] = set()

    def read_view(self, md: Any, start: int, end: int, *, next_md: Any = None) -> memoryview:
        end = min(end, len(self.data))
        self.chunks.update(range(start // CHUNK, (end - 1) // CHUNK + 1))
        return memoryview(self.data)[start:end]


def segment(batches: int = 40, value: int = 9000) -> bytes:
    out, offset = bytearray(), 0
    for b in range(batches):
        recs: list[Any] = [(b"k%d" % i, bytes([65 + b % 26]) * value, [], 1_700_000_000_000 + b)
                for i in range(1 + b % 3)]
        out += encode_batch(recs, base_offset=offset)
        offset += len(recs)
    return bytes(out)


def crosses(h: Any) -> bool:
    """Across a chunk's end, with its length prefix before it."""
    return bool(h.position + 12 <= (h.position // CHUNK + 1) * CHUNK < h.end_position)


def md_for(data: bytes) -> Any:
    heads = list(iter_batches(data))
    return SimpleNamespace(segment_size_in_bytes=len(data), end_offset=heads[-1].last_offset, start_offset=0,
                           topic_id_partition=SimpleNamespace(topic="t", partition=0),
                           remote_log_segment_id=SimpleNamespace(id="seg"))


def take(reader: ChunkReader, md: Any, start: int, max_bytes: int, limit: WalkLimit | None) -> bytes:
    """The fetch's rule: the first batch, then the following ones while they fit in ``max_bytes``."""
    taken: list[bytes] = []
    size = 0
    for b in walk(reader, md, start, window=max_bytes + 16 * 1024, sequential=True, limit=limit):  # type: ignore[arg-type]
        if not taken:
            if limit is not None:
                limit.end = b.header.position + max(b.header.size, max_bytes)
        elif size + b.header.size > max_bytes:
            break
        taken.append(bytes(b.data))
        size += b.header.size
    return b"".join(taken)


@pytest.mark.parametrize("first", [0, 3, 9])
def test_the_next_chunk_is_not_read_for_a_batch_that_will_not_be_taken(first: int) -> None:
    data = segment()
    md = md_for(data)
    heads = list(iter_batches(data))
    cut = next(h for h in heads[first + 1:] if crosses(h))
    start = heads[first]
    max_bytes = cut.position - start.position  # every batch before the cut one fits, it does not
    with_limit, without = ChunkReader(data), ChunkReader(data)
    got = take(with_limit, md, start.position, max_bytes, WalkLimit())
    assert got == take(without, md, start.position, max_bytes, None) == data[start.position:cut.position]
    boundary_chunk = cut.end_position // CHUNK
    assert boundary_chunk in without.chunks  # before: the next chunk was read (and waited for)
    assert boundary_chunk not in with_limit.chunks


def test_a_batch_that_fits_is_still_read_across_the_chunk_end() -> None:
    data = segment()
    md = md_for(data)
    heads = list(iter_batches(data))
    cut = next(h for h in heads[1:] if crosses(h))
    reader = ChunkReader(data)
    got = take(reader, md, 0, cut.end_position, WalkLimit())  # room for the cut batch too
    assert got == data[:cut.end_position]
    # and a whole-segment walk with the limit never set is complete (the end-of-segment check runs)
    assert b"".join(bytes(b.data) for b in walk(reader, md, 0, window=CHUNK, sequential=True,  # type: ignore[arg-type]
                                                limit=WalkLimit())) == data
