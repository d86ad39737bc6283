"""Object keys of Aiven's layout, including the KIP-917 custom metadata that can override them.

``<key.prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>``; when
the broker ran with ``custom.metadata.fields.include`` containing ``OBJECT_PREFIX`` or
``OBJECT_KEY``, the segment's custom metadata (Kafka tagged fields: tag 0 remote size, 1 object
prefix, 2 object key) names the ``.log`` and ``.indexes`` objects instead, and Aiven's reader
prefers it. The ``.rsm-manifest`` key always comes from the configured prefix and the metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm.types import check_topic_name

from .api import RemoteLogSegmentMetadata, RemoteObjectFormatError, TopicIdPartition
from .layout import offset_prefix

_TAG_OBJECT_PREFIX = 1
_TAG_OBJECT_KEY = 2


@dataclass(frozen=True, slots=True)
class ObjectKeys:
    log: str
    indexes: str
    manifest: str


def partition_prefix(tp: TopicIdPartition) -> str:
    """``<topic>-<topicId>/<partition>/``: where a partition's objects are, below ``key.prefix``."""
    return f"{check_topic_name(tp.topic)}-{tp.topic_id.text}/{tp.partition}/"


def main_path(metadata: RemoteLogSegmentMetadata) -> str:
    """``<topic>-<topicId>/<partition>/<start offset>-<segmentId>``: a key without prefix or suffix."""
    return (f"{partition_prefix(metadata.topic_id_partition)}"
            f"{offset_prefix(metadata.start_offset)}-{metadata.remote_log_segment_id.id.text}")


def object_keys(key_prefix: str, metadata: RemoteLogSegmentMetadata) -> ObjectKeys:
    main = main_path(metadata)
    fields = decode_custom_metadata(metadata.custom_metadata) if metadata.custom_metadata else {}
    prefix = fields.get(_TAG_OBJECT_PREFIX, key_prefix)
    data_main = fields.get(_TAG_OBJECT_KEY, main)
    return ObjectKeys(f"{prefix}{data_main}.log", f"{prefix}{data_main}.indexes",
                      f"{key_prefix}{main}.rsm-manifest")


def decode_custom_metadata(raw: bytes) -> dict[int, str]:
    """The string fields (object prefix, object key) of Aiven's custom metadata, by tag.

    Tagged-fields encoding: uvarint count, then per field uvarint tag, uvarint size and the value;
    the strings are COMPACT_STRING (uvarint length + 1, UTF-8). Other tags are skipped.
    """
    out: dict[int, str] = {}
    try:
        count, pos = _uvarint(raw, 0)
        for _ in range(count):
            tag, pos = _uvarint(raw, pos)
            size, pos = _uvarint(raw, pos)
            value = raw[pos:pos + size]
            if len(value) != size:
                raise ValueError("field runs past the end")
            pos += size
            if tag in (_TAG_OBJECT_PREFIX, _TAG_OBJECT_KEY):
                length, start = _uvarint(value, 0)
                text = value[start:start + length - 1]
                if length < 1 or len(text) != length - 1:
                    raise ValueError("bad compact string")
                out[tag] = text.decode("utf-8")
        if pos != len(raw):
            raise ValueError(f"{len(raw) - pos} bytes after the last field")
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise RemoteObjectFormatError(
            f"segment {metadata_hint(raw)}: custom metadata is not Aiven's tagged fields: {e}") from None
    return out


def metadata_hint(raw: bytes) -> str:
    return f"custom metadata {raw[:16].hex()}{'...' if len(raw) > 16 else ''}"


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ValueError("varint too long")
