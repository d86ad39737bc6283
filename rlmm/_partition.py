"""One user partition's cached state and its binary snapshot form.

The snapshot stores the columns and the per-epoch indexes exactly as they are, not the list of
live segments: Kafka's lookup state depends on the order events arrived in (overlapping uploads,
replaced entries, highest offsets of deleted segments), so it cannot be rebuilt from segments
alone. Layout (little-endian): ``magic "RLMC" | u16 format | u16 0 | u64 body length | u32
CRC-32C(body) | body``; any mismatch raises :class:`~rlm.errors.MetadataDecodeError` so callers
fall back to replaying the log — never to wrong state.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import google_crc32c
import numpy as np

from rlm.errors import MetadataDecodeError
from rlm.types import KafkaUuid, RemotePartitionDeleteMetadata, RemotePartitionDeleteState, TopicIdPartition
from rlmm._epoch_index import EpochState
from rlmm._segment_table import COLUMNS, Col, SegmentTable

MAGIC = b"RLMC"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHHQI")
_SOURCE = "rlmm-snapshot"
COMPACT_MIN_DEAD = 1024  # dead rows tolerated before compaction (module-level so tests can lower it)


class PartitionState:
    """Segments (columnar) and per-epoch lookup state of one user partition."""

    __slots__ = ("epochs", "table", "tp")

    def __init__(self, tp: TopicIdPartition, table: SegmentTable | None = None,
                 epochs: dict[int, EpochState] | None = None) -> None:
        self.tp = tp
        self.table = table if table is not None else SegmentTable()
        self.epochs: dict[int, EpochState] = epochs if epochs is not None else {}

    def epoch(self, epoch: int) -> EpochState:
        """``leaderEpochEntries.computeIfAbsent`` (Kafka never removes epoch entries either)."""
        es = self.epochs.get(epoch)
        if es is None:
            es = self.epochs[epoch] = EpochState()
        return es

    def compact(self) -> None:
        mapping = self.table.compact()
        for es in self.epochs.values():
            es.remap(mapping)

    def maybe_compact(self) -> None:
        dead = self.table.n - self.table.live
        if dead > max(COMPACT_MIN_DEAD, self.table.live):
            self.compact()


# ---- encoding -------------------------------------------------------------------------------------
def _arr(out: list[bytes], arr: Col) -> None:
    out.append(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes())


def _encode_partition(out: list[bytes], tp: TopicIdPartition, p: PartitionState | None,
                      delete: RemotePartitionDeleteMetadata | None) -> None:
    name = tp.topic.encode()
    out.append(struct.pack("<H", len(name)) + name + tp.topic_id.raw + struct.pack("<i", tp.partition))
    if delete is None:
        out.append(b"\x00")
    else:
        out.append(struct.pack("<Bbiq", 1, int(delete.state), delete.broker_id, delete.event_timestamp_ms))
    if p is None:
        out.append(struct.pack("<IQQI", 0, 0, 0, 0))
        return
    p.compact()
    t = p.table
    out.append(struct.pack("<IQQ", t.n, t.fe_n, len(t.cm_buf)))
    for name_, _ in COLUMNS:
        _arr(out, t.c[name_][: t.n])
    _arr(out, t.fe_epoch[: t.fe_n])
    _arr(out, t.fe_off[: t.fe_n])
    out.append(bytes(t.cm_buf))
    out.append(struct.pack("<I", len(p.epochs)))
    for epoch in sorted(p.epochs):
        es = p.epochs[epoch]
        keys, rows = es.entries()
        unref = np.array(sorted(es.unref), dtype=np.int32)
        out.append(struct.pack("<iBqII", epoch, es.highest is not None,
                               es.highest if es.highest is not None else 0, len(keys), len(unref)))
        _arr(out, keys)
        _arr(out, rows)
        _arr(out, unref)


Entry = tuple[TopicIdPartition, PartitionState | None, RemotePartitionDeleteMetadata | None]


def encode(items: Iterable[Entry]) -> bytes:
    parts = list(items)
    body: list[bytes] = [struct.pack("<I", len(parts))]
    for tp, p, delete in parts:
        _encode_partition(body, tp, p, delete)
    data = b"".join(body)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(data), google_crc32c.value(data)) + data


# ---- decoding -------------------------------------------------------------------------------------
class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MetadataDecodeError(f"snapshot truncated at byte {self.pos}", source=_SOURCE)
        start = self.pos
        self.pos += n
        return self.data[start:self.pos]

    def unpack(self, fmt: str) -> tuple[int, ...]:
        s = struct.Struct(fmt)
        return tuple(int(v) for v in s.unpack(self.take(s.size)))

    def array(self, dtype: type[np.generic], count: int) -> Col:
        dt = np.dtype(dtype).newbyteorder("<")
        raw = self.take(count * dt.itemsize)
        return np.frombuffer(raw, dtype=dt).astype(np.dtype(dtype), copy=True)


def _bad(reason: str) -> MetadataDecodeError:
    return MetadataDecodeError(f"snapshot is inconsistent: {reason}", source=_SOURCE)


def _decode_partition(cur: _Cursor) -> tuple[TopicIdPartition, PartitionState | None,
                                              RemotePartitionDeleteMetadata | None]:
    (name_len,) = cur.unpack("<H")
    try:
        name = cur.take(name_len).decode()
    except UnicodeDecodeError:
        raise _bad("topic name is not UTF-8") from None
    tp = TopicIdPartition(KafkaUuid(cur.take(16)), name, cur.unpack("<i")[0])
    delete = None
    if cur.unpack("<B")[0]:
        state, broker, ts = cur.unpack("<biq")
        try:
            delete = RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState(state), ts, broker)
        except ValueError:
            raise _bad(f"unknown partition delete state {state}") from None
    n, fe_n, cm_n = cur.unpack("<IQQ")
    cols = {name_: cur.array(dt, n) for name_, dt in COLUMNS}
    fe_epoch = cur.array(np.int32, fe_n)
    fe_off = cur.array(np.int64, fe_n)
    cm_buf = bytearray(cur.take(cm_n))
    (n_epochs,) = cur.unpack("<I")
    if n == 0 and n_epochs == 0:
        return tp, None, delete
    st = cols["state"]
    if n and (st.min() < -1 or st.max() > 3):
        raise _bad("segment state out of range")
    ep_end = cols["ep_start"] + cols["ep_cnt"]
    if n and (cols["ep_start"].min() < 0 or cols["ep_cnt"].min() < 1 or ep_end.max() > fe_n):
        raise _bad("epoch ranges out of bounds")
    has_cm = cols["cm_len"] >= 0
    if np.any(has_cm) and (cols["cm_off"][has_cm].min() < 0
                           or (cols["cm_off"] + cols["cm_len"])[has_cm].max() > cm_n):
        raise _bad("custom metadata out of bounds")
    epochs: dict[int, EpochState] = {}
    for _ in range(n_epochs):
        epoch, has_hi, hi, nk, nu = cur.unpack("<iBqII")
        keys = cur.array(np.int64, nk)
        rows = cur.array(np.int32, nk)
        unref = cur.array(np.int32, nu)
        if (nk and (rows.min() < 0 or rows.max() >= n or np.any(np.diff(keys) <= 0))) or \
                (nu and (unref.min() < 0 or unref.max() >= n)):
            raise _bad(f"epoch {epoch} index out of bounds or unsorted")
        epochs[epoch] = EpochState.restore(keys, rows, hi if has_hi else None,
                                           set(unref.tolist()))
    table = SegmentTable.from_columns(cols, fe_epoch, fe_off, cm_buf)
    return tp, PartitionState(tp, table, epochs), delete


def decode(data: bytes) -> list[tuple[TopicIdPartition, PartitionState | None,
                                      RemotePartitionDeleteMetadata | None]]:
    """Parses a whole snapshot; raises MetadataDecodeError before returning anything partial."""
    if len(data) < _HEADER.size:
        raise MetadataDecodeError("snapshot shorter than its header", source=_SOURCE)
    magic, version, _, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise MetadataDecodeError(f"not an rlmm snapshot (magic {magic!r})", source=_SOURCE)
    if version != FORMAT_VERSION:
        raise MetadataDecodeError(f"unsupported snapshot format version {version}", source=_SOURCE)
    body = bytes(data[_HEADER.size:])
    if len(body) != length:
        raise MetadataDecodeError(f"snapshot body has {len(body)} bytes, header says {length}",
                                  source=_SOURCE)
    if google_crc32c.value(body) != crc:
        raise MetadataDecodeError("snapshot CRC-32C mismatch", source=_SOURCE)
    cur = _Cursor(body, 0)
    (count,) = cur.unpack("<I")
    result = [_decode_partition(cur) for _ in range(count)]
    if cur.pos != len(body):
        raise _bad(f"{len(body) - cur.pos} trailing bytes")
    return result
