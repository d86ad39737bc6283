"""The ``.rsm-manifest`` of Aiven's tiered-storage plugin: parsed, checked, and its chunk index.

Aiven's RemoteStorageManager (the most used plugin of Kafka's native tiered storage) cuts a
segment into chunks of ``originalChunkSize`` bytes, optionally zstd-compresses and AES-GCM
encrypts each chunk, and stores the concatenation as the ``.log`` object; the manifest says where
each transformed chunk starts (the *chunk index*) and where each index sits inside the
``.indexes`` object. This module only reads that JSON: any field we do not understand, any size
that cannot be right, is a :class:`RemoteObjectFormatError` here, before a byte of the segment is
decoded, so that a reader never returns bytes from a misread layout.

Format facts: ``docs/native-tiered-storage.md`` (sources: Aiven's ``SegmentManifestV1``,
``ChunkIndex`` serdes and ``ChunkSizesBinaryCodec``).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from rlm.errors import RemoteObjectFormatError
from rlm.types import IndexType

#: the only manifest version Aiven's plugin has ever written (a Jackson type discriminator)
SUPPORTED_VERSION = "1"
#: Aiven caps the decompressed chunk-size list at 10 MiB; so do we (a bomb is not a manifest)
_MAX_SIZES_BYTES = 10 * 1024 * 1024
#: Java ``int`` sizes: segments are below 2 GiB
_INT_MAX = 2**31 - 1

_INDEX_FIELDS: dict[IndexType, str] = {
    IndexType.OFFSET: "offset",
    IndexType.TIMESTAMP: "timestamp",
    IndexType.PRODUCER_SNAPSHOT: "producerSnapshot",
    IndexType.LEADER_EPOCH: "leaderEpoch",
    IndexType.TRANSACTION: "transaction",
}


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Where each chunk of the original ``.log`` lives in the transformed object.

    ``starts`` has one entry per chunk plus the end: chunk *i* is transformed bytes
    ``[starts[i], starts[i+1])`` and original bytes ``[i*C, min((i+1)*C, original_size))``. An
    empty segment is one empty chunk.
    """

    original_chunk_size: int
    original_size: int
    starts: np.ndarray  # int64, len = chunks + 1

    @property
    def chunks(self) -> int:
        return len(self.starts) - 1

    @property
    def transformed_size(self) -> int:
        return int(self.starts[-1])

    def original_range(self, chunk: int) -> tuple[int, int]:
        lo = chunk * self.original_chunk_size
        return lo, min(lo + self.original_chunk_size, self.original_size)

    def chunks_for(self, start: int, stop: int) -> range:
        """The chunks holding original bytes ``[start, stop)`` (``stop > start``)."""
        c = self.original_chunk_size
        return range(start // c, (stop - 1) // c + 1)


@dataclass(frozen=True, slots=True)
class IndexSlice:
    """One index inside the ``.indexes`` object (transformed bytes: encrypted when the segment is)."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class Encryption:
    """The segment's wrapped data key (``<keyPairId>:<base64 RSA-OAEP ciphertext>``) and GCM AAD."""

    key_pair_id: str
    wrapped_key: bytes
    aad: bytes


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """A parsed ``.rsm-manifest``: how to turn the stored objects back into the segment's files."""

    chunk_index: ChunkIndex
    indexes: dict[IndexType, IndexSlice | None]
    compression: bool
    encryption: Encryption | None
    #: the ``remoteLogSegmentMetadata`` the plugin embeds (for a metadata rebuild); raw JSON
    segment_metadata: dict[str, Any] | None

    def index_slice(self, index_type: IndexType) -> IndexSlice | None:
        return self.indexes.get(index_type)

    @property
    def indexes_size(self) -> int:
        """The size the ``.indexes`` object must have: the end of its last index."""
        ends = [s.position + s.size for s in self.indexes.values() if s is not None]
        return max(ends, default=0)


def parse_manifest(raw: bytes, what: str) -> SegmentManifest:
    """Parse and check a manifest; :class:`RemoteObjectFormatError` naming ``what`` otherwise."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RemoteObjectFormatError(f"{what}: not a JSON manifest: {e}") from None
    if not isinstance(doc, dict):
        raise RemoteObjectFormatError(f"{what}: manifest is not a JSON object")
    version = doc.get("version")
    if version != SUPPORTED_VERSION:
        raise RemoteObjectFormatError(
            f"{what}: manifest version {version!r} is not supported (only {SUPPORTED_VERSION!r} exists "
            "in Aiven's plugin up to 1.1; a newer plugin wrote this segment)"
        )
    try:
        chunk_index = _chunk_index(_obj(doc, "chunkIndex"), what)
        indexes = _indexes(_obj(doc, "segmentIndexes"), what)
        compression = doc.get("compression", False)
        if not isinstance(compression, bool):
            raise RemoteObjectFormatError(f"{what}: 'compression' is not a boolean")
        enc = doc.get("encryption")
        encryption = _encryption(enc, what) if enc is not None else None
    except (KeyError, TypeError) as e:
        raise RemoteObjectFormatError(f"{what}: malformed manifest ({e})") from None
    seg = doc.get("remoteLogSegmentMetadata")
    return SegmentManifest(chunk_index, indexes, compression, encryption,
                           seg if isinstance(seg, dict) else None)


def _obj(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc[key]
    if not isinstance(value, dict):
        raise TypeError(f"{key!r} is not an object")
    return value


def _int(doc: dict[str, Any], key: str, what: str, *, lo: int = 0) -> int:
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= _INT_MAX:
        raise RemoteObjectFormatError(f"{what}: {key} = {value!r} is not a size")
    return value


def _chunk_index(doc: dict[str, Any], what: str) -> ChunkIndex:
    kind = doc.get("type")
    c = _int(doc, "originalChunkSize", what, lo=1)
    n = _int(doc, "originalFileSize", what)
    count = max(1, -(-n // c))
    if kind == "fixed":
        t = _int(doc, "transformedChunkSize", what)
        last = _int(doc, "finalTransformedChunkSize", what)
        starts = np.arange(count + 1, dtype=np.int64) * t
        starts[-1] = starts[-2] + last
    elif kind == "variable":
        sizes = decode_chunk_sizes(str(doc["transformedChunks"]), what)
        if len(sizes) != count:
            raise RemoteObjectFormatError(
                f"{what}: chunk index lists {len(sizes)} chunks, but {n} bytes in chunks of {c} are {count}"
            )
        starts = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
    else:
        raise RemoteObjectFormatError(f"{what}: unknown chunk index type {kind!r}")
    return ChunkIndex(c, n, starts)


def decode_chunk_sizes(text: str, what: str) -> np.ndarray:
    """Aiven's ``ChunkSizesBinaryCodec`` inside base64(zstd(...)): the transformed chunk sizes.

    Layout: int32 count; count 1 → one int32; count > 1 → int32 base, uint8 width (1 to 4), count-1
    offsets from base of that width, then the last size as a full int32; all big-endian.
    """
    try:
        frame = base64.b64decode(text, validate=True)
        raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=_MAX_SIZES_BYTES)
    except (binascii.Error, ValueError, zstandard.ZstdError) as e:
        raise RemoteObjectFormatError(
            f"{what}: chunk index 'transformedChunks' does not decode: {e}") from None
    bad = RemoteObjectFormatError(
        f"{what}: chunk index 'transformedChunks' has a bad length ({len(raw)} bytes)")
    if len(raw) < 4:
        raise bad
    count = int.from_bytes(raw[:4], "big", signed=True)
    if count < 0:
        raise bad
    if count <= 1:
        if len(raw) != 4 + 4 * count:
            raise bad
        return np.frombuffer(raw, dtype=">i4", offset=4).astype(np.int64)
    if len(raw) < 9:
        raise bad
    base = int.from_bytes(raw[4:8], "big", signed=True)
    width = raw[8]
    if not 1 <= width <= 4 or len(raw) != 9 + (count - 1) * width + 4:
        raise bad
    packed = np.frombuffer(raw, dtype=np.uint8, count=(count - 1) * width, offset=9).reshape(count - 1, width)
    wide = np.zeros((count - 1, 4), dtype=np.uint8)
    wide[:, 4 - width:] = packed
    sizes = np.empty(count, dtype=np.int64)
    sizes[:-1] = wide.view(">u4").reshape(-1).astype(np.int64) + base
    sizes[-1] = int.from_bytes(raw[-4:], "big", signed=True)
    if (sizes < 0).any() or (sizes > _INT_MAX).any():
        raise RemoteObjectFormatError(f"{what}: chunk index has a negative or oversized chunk")
    return sizes


def _indexes(doc: dict[str, Any], what: str) -> dict[IndexType, IndexSlice | None]:
    out: dict[IndexType, IndexSlice | None] = {}
    for index_type, key in _INDEX_FIELDS.items():
        entry = doc.get(key)
        if entry is None:
            if index_type is not IndexType.TRANSACTION:
                raise RemoteObjectFormatError(f"{what}: segmentIndexes has no {key!r}")
            out[index_type] = None
            continue
        if not isinstance(entry, dict):
            raise RemoteObjectFormatError(f"{what}: segmentIndexes.{key} is not an object")
        out[index_type] = IndexSlice(_int(entry, "position", what), _int(entry, "size", what))
    return out


def _encryption(doc: Any, what: str) -> Encryption:
    if not isinstance(doc, dict):
        raise RemoteObjectFormatError(f"{what}: 'encryption' is not an object")
    data_key = doc.get("dataKey")
    if not isinstance(data_key, str) or data_key.count(":") != 1:
        raise RemoteObjectFormatError(f"{what}: encryption.dataKey is not '<keyPairId>:<base64>'")
    key_id, _, wrapped = data_key.partition(":")
    try:
        wrapped_key = base64.b64decode(wrapped, validate=True)
        aad = base64.b64decode(str(doc.get("aad", "")), validate=True)
    except (binascii.Error, ValueError) as e:
        raise RemoteObjectFormatError(f"{what}: encryption fields are not base64: {e}") from None
    if not key_id or not wrapped_key:
        raise RemoteObjectFormatError(f"{what}: encryption.dataKey has an empty key-pair id or key")
    return Encryption(key_id, wrapped_key, aad)
