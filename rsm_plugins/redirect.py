"""Adopted segments: metadata of one topic id pointing at objects stored under another.

After a disaster recovery (``rlm restore --adopt-into``, docs/disaster-recovery.md) the new
cluster's topic has a **new topic id**, while the bucket holds the old history under the **old**
one — and every built-in plugin derives a segment's object names from the topic id of its
metadata (:mod:`rsm_plugins.layout`). Copying the objects to the new names would cost a full
rewrite of the bucket; instead the adopted COPY_SEGMENT_FINISHED records (new topic id, the
original segment id, offsets and epochs unchanged) carry the original partition in their
**custom metadata** (KIP-917, an opaque tagged field of Kafka's metadata record: the records stay
byte-compatible with Kafka's own serde), wrapped around the custom metadata of the original copy:

====== ===================================================================
bytes  meaning
====== ===================================================================
1      magic ``0xA6`` (``0xA5`` is :mod:`rsm_plugins.integrity`'s manifest)
1      format version (1)
16     the topic id the objects are stored under
n      uvarint length + UTF-8: the topic name they are stored under
n      uvarint: the partition they are stored under
rest   the original copy's custom metadata (checksums, location), may be empty
====== ===================================================================

Plugins honour it in one place each: :func:`rsm_plugins.layout.kafka_relative_path` and
:func:`~rsm_plugins.layout.s3_key` name the objects from :func:`stored_partition`, and
:func:`rsm_plugins.integrity.decode` reads the wrapped manifest, so reads, checksums, deletes
(retention on an adopted segment deletes the original objects) and descriptors all follow the
redirect. A third-party plugin that does not know it reads under the new topic id and finds
nothing (a clear not-found, never wrong data).

Size: 2 + 16 + 1 + len(name) + 1 + inner. Only restore writes such records (never a broker's
copy), so ``remote.log.metadata.custom.metadata.max.bytes`` — a check on the copy path of
Kafka's RemoteLogManager — does not apply; the metadata topic's serde has no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.errors import RemoteStorageIntegrityError
from rlm.types import KafkaUuid, RemoteLogSegmentMetadata, TopicIdPartition, check_topic_name

MAGIC = 0xA6
VERSION = 1


@dataclass(frozen=True, slots=True)
class Redirect:
    """Where an adopted segment's objects are, and the original copy's custom metadata."""

    stored: TopicIdPartition
    inner: bytes | None


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if not value:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while shift <= 63:
        if pos >= len(buf):
            raise ValueError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise ValueError(f"varint too long at byte {pos}")


def encode(stored: TopicIdPartition, inner: bytes | None) -> bytes:
    """The custom metadata of an adopted segment whose objects are stored under ``stored``.
    An already adopted segment's redirect is not nested: its own ``stored`` partition is kept."""
    found = decode(inner)
    if found is not None:
        stored, inner = found.stored, found.inner
    name = check_topic_name(stored.topic).encode()
    return (bytes([MAGIC, VERSION]) + stored.topic_id.raw + _uvarint(len(name)) + name
            + _uvarint(stored.partition) + (inner or b""))


def decode(blob: bytes | None) -> Redirect | None:
    """The redirect carried by ``blob``, ``None`` when it carries none (custom metadata of a
    normal copy, or none). Raises :class:`RemoteStorageIntegrityError` when it is one but
    malformed: reading another partition's objects by mistake must not be possible."""
    if not blob or blob[0] != MAGIC:
        return None
    try:
        if len(blob) < 19:
            raise ValueError(f"{len(blob)} bytes, the header needs 19")
        if blob[1] != VERSION:
            raise ValueError(f"unsupported version {blob[1]}")
        topic_id = KafkaUuid(bytes(blob[2:18]))
        n, pos = _read_uvarint(blob, 18)
        if pos + n > len(blob):
            raise ValueError(f"topic name of {n} bytes runs past the end")
        topic = check_topic_name(blob[pos:pos + n].decode())
        partition, pos = _read_uvarint(blob, pos + n)
        inner = bytes(blob[pos:]) or None
    except (ValueError, UnicodeDecodeError) as e:
        raise RemoteStorageIntegrityError(
            f"redirect in the segment's custom metadata is malformed: {e}") from e
    return Redirect(TopicIdPartition(topic_id, topic, partition), inner)


def stored_partition(metadata: RemoteLogSegmentMetadata) -> TopicIdPartition:
    """The partition whose names a segment's objects carry: the redirect's, else its own."""
    found = decode(metadata.custom_metadata)
    return found.stored if found is not None else metadata.topic_id_partition


def inner_custom_metadata(blob: bytes | None) -> bytes | None:
    """``blob`` without a redirect around it (the original copy's custom metadata)."""
    found = decode(blob)
    return found.inner if found is not None else blob
