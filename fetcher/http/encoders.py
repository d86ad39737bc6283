"""Response bodies of ``/records``: raw batch bytes, NDJSON records, an Arrow IPC stream.

All three are produced piece by piece (bounded pieces, never the whole answer re-encoded at
once) and only from what the read core returned: raw bytes from ``RemoteFetcher.fetch``,
records decoded from those bytes by :mod:`rlm.log`, Arrow batches from ``RemoteFetcher.scan``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa

from fetcher import record_obj
from fetcher.fetch import FetchResult

RAW = "application/vnd.kafka.record-batches"
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"
MEDIA_TYPES = (NDJSON, RAW, ARROW)

PIECE_BYTES = 256 * 1024


def raw_pieces(result: FetchResult) -> Iterator[bytes]:
    """The fetched batch bytes, unchanged, in bounded pieces."""
    data = memoryview(result.records)
    for i in range(0, len(data), PIECE_BYTES):
        yield bytes(data[i:i + PIECE_BYTES])


def ndjson_pieces(result: FetchResult, start_offset: int) -> Iterator[bytes]:
    """One ``rlm dump --json`` object per data record at or after ``start_offset`` (as a consumer
    sees them: records before it in the first batch and control records are left out). ``position``
    is the batch's byte position in the raw answer of the same request."""
    lines: list[str] = []
    size = 0
    for h, rec in result.data_records(start_offset):
        line = json.dumps(record_obj(h, rec), separators=(",", ":"))
        lines.append(line)
        size += len(line) + 1
        if size >= PIECE_BYTES:
            yield ("\n".join(lines) + "\n").encode()
            lines, size = [], 0
    if lines:
        yield ("\n".join(lines) + "\n").encode()


class _Sink:
    """A write-only file collecting what the Arrow IPC writer emits, drained after each batch."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes | memoryview) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def arrow_pieces(schema: pa.Schema, batches: Iterable[pa.RecordBatch], max_bytes: int) -> Iterator[bytes]:
    """An Arrow IPC stream of ``batches``, ended once ``max_bytes`` of it are written (whole record
    batches: at least one, the last may pass the budget). Always a complete stream, with schema."""
    sink = _Sink()
    writer = pa.ipc.new_stream(sink, schema)
    written = 0
    for batch in batches:
        writer.write_batch(batch)
        piece = sink.take()
        written += len(piece)
        yield piece
        if written >= max_bytes:
            break
    writer.close()
    yield sink.take()
