"""One record as a JSON-ready dict: the shape of ``rlm dump --json`` lines.

Shared by ``rlm dump --json`` and the read side's JSON faces (``rlm fetch --format json``, the
HTTP API's ``application/x-ndjson``), so a record looks the same wherever it is printed: record
fields, then its batch's fields; keys, values and header values base64 (``null`` stays null).
"""

from __future__ import annotations

import base64
from typing import Any

from rlm.log.records import BatchHeader, ControlRecord, Record, TimestampType

TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def batch_fields(h: BatchHeader) -> dict[str, Any]:
    """The batch fields every record line carries (``position``: the batch's byte position)."""
    return {"base_offset": h.base_offset, "partition_leader_epoch": h.partition_leader_epoch,
            "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
            "base_sequence": h.base_sequence,
            "is_transactional": h.is_transactional, "compression": h.compression.name.lower(),
            "magic": h.magic, "position": h.position}


def record_obj(h: BatchHeader, r: Record | ControlRecord) -> dict[str, Any]:
    """A data record (key/value/headers base64) or a control record (``control`` type/epoch)."""
    if isinstance(r, ControlRecord):
        kind = r.type.name if hasattr(r.type, "name") else int(r.type)
        return {"offset": r.offset, "timestamp": r.timestamp,
                "control": {"type": kind, "coordinator_epoch": r.coordinator_epoch}, **batch_fields(h)}
    return {"offset": r.offset, "timestamp": r.timestamp,
            "timestamp_type": TIMESTAMP_TYPE_NAMES[r.timestamp_type],
            "key": b64(r.key), "value": b64(r.value), "headers": [[k, b64(v)] for k, v in r.headers],
            **batch_fields(h)}
