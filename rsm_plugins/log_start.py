"""The published log start offset: one small JSON object per partition, next to its segments.

Why it exists: records deleted with ``DeleteRecords`` must never be served again, by any reader.
The daemon (on the partition leader's node) sees the broker's log start in the log dir; a
reader configured with neither a log dir nor a broker sees only remote storage and metadata.
So the daemon publishes the partition's log start where every reader already looks: in the
storage plugin, beside the segments (``log-start-offset.json``; in the ``kafka`` layout inside
``<topic>-<partition>-<topicId>/``, in the ``s3`` layout under ``<topic>-<topicId>/<partition>/``).

Format (UTF-8 JSON, one object)::

    {"version": 1, "topic": "orders", "topic_id": "<base64url>", "partition": 0,
     "log_start_offset": 2793, "updated_ms": 1764165000000}

Only the daemon writes it, only when the value grows (the log start never moves back), and
atomically (a reader sees the old or the new object, never half of one). Readers: absent =
nothing published (no ``DeleteRecords`` seen yet, an older daemon, or a plugin without the
optional methods) and they fall back to their other sources; unreadable, another partition's,
or an unknown version = :class:`RemoteStorageIntegrityError`, because a bound exists that the
reader cannot know and serving records it may cover would bring deleted records back.
"""

from __future__ import annotations

import json
from typing import Any

from .api import RemoteStorageIntegrityError, TopicIdPartition

#: The object's base name, in the partition's directory or prefix.
OBJECT_NAME = "log-start-offset.json"
VERSION = 1
#: Bigger than any valid object: a reader never loads more than this.
MAX_BYTES = 4096


def encode(tp: TopicIdPartition, log_start_offset: int, updated_ms: int) -> bytes:
    """The object's bytes for ``tp``."""
    if log_start_offset < 0:
        raise ValueError(f"log start offset must be >= 0, not {log_start_offset}")
    doc = {"version": VERSION, "topic": tp.topic, "topic_id": tp.topic_id.text, "partition": tp.partition,
           "log_start_offset": int(log_start_offset), "updated_ms": int(updated_ms)}
    return json.dumps(doc, sort_keys=True).encode() + b"\n"


def decode(tp: TopicIdPartition, data: bytes, where: str) -> int:
    """The log start offset stored in ``data``; :class:`RemoteStorageIntegrityError` when the
    bytes are not a valid object for ``tp`` (``where`` names the object in the message)."""
    def bad(why: str) -> RemoteStorageIntegrityError:
        return RemoteStorageIntegrityError(f"{where}: corrupt log start object ({why})")

    if len(data) > MAX_BYTES:
        raise bad(f"{len(data)} bytes")
    try:
        doc: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise bad("not an object")
    if doc.get("version") != VERSION:
        raise bad(f"unknown version {doc.get('version')!r}")
    written_for = (doc.get("topic"), doc.get("topic_id"), doc.get("partition"))
    if written_for != (tp.topic, tp.topic_id.text, tp.partition):
        raise bad(f"written for {doc.get('topic')}-{doc.get('partition')} ({doc.get('topic_id')}), not {tp}")
    value = doc.get("log_start_offset")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad(f"log_start_offset {value!r}")
    return value
