"""Frames <-> kio entities: request headers, response framing, version tables, error responses.

kio (generated from Kafka's own message JSON) supplies one frozen dataclass per API, version
and nested struct; this module only picks the right class for a frame and fills classes by field
name, so the handlers can build one response for every version they support.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity, RequestPayload, ResponsePayload

# the client side of the protocol (also what the shared broker connections speak), re-exported
from fetcher.cluster_auth.wire import encode_request as encode_request
from fetcher.cluster_auth.wire import make as make
from fetcher.cluster_auth.wire import read_response as read_response
from fetcher.cluster_auth.wire import response_class as response_class
from fetcher.fetch import RecordViews
from fetcher.kafka.frame_bounds import check_entity

API_VERSIONS_KEY = 18

#: (api key) -> (min, max) version this endpoint answers; everything else is unsupported.
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce: advertised for librdkafka's MsgVer2 feature, always refused
    1: (4, 17),  # Fetch (topic ids from 13)
    2: (1, 7),  # ListOffsets
    3: (1, 12),  # Metadata
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch (batched groups from 8)
    10: (0, 4),  # FindCoordinator (batched keys from 4)
    11: (2, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup (batched members from 3)
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups (types filter from 5)
    18: (0, 3),  # ApiVersions
    23: (2, 4),  # OffsetForLeaderEpoch (position validation: librdkafka needs 2, Java 3)
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848; v1: client-generated member ids)
    69: (0, 1),  # ConsumerGroupDescribe (kafka-consumer-groups --describe of a KIP-848 group)
}

_HEAD = struct.Struct(">hhi")


class FrameError(Exception):
    """A request frame this endpoint cannot even answer (Kafka closes the connection then)."""


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed start of every request header."""
    if len(frame) < _HEAD.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    key, version, corr = _HEAD.unpack_from(frame)
    return key, version, corr


def request_class(key: int, version: int) -> type[RequestPayload] | None:
    """kio's request class, or ``None`` when kio knows no such API/version."""
    try:
        return load_request_schema(key, version)
    except (UnknownAPIKey, UnknownEntity):
        return None


def decode_request(frame: bytes, cls: type[RequestPayload]) -> tuple[Any, RequestPayload]:
    """(header, body) of a frame; raises :class:`FrameError` on bytes that do not parse."""
    try:
        header, n = entity_reader(cls.__header_schema__)(frame, 0)
        check_entity(cls, frame, n)  # no array longer than the frame: kio would abort the process
        body, _ = entity_reader(cls)(frame, n)
    except Exception as e:  # kio raises several types (struct, Unicode, its own) on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{cls.__version__}: {e}") from e
    # bytes after the body are ignored, as Kafka's own parser ignores them: librdkafka 2.x's admin
    # Metadata v12 (list_topics) carries three of them, and a broker answers it
    return header, body


#: values at least this long (a partition's records) are kept by reference in a response frame
_BIG = 64 * 1024


class ResponseFrame:
    """An encoded response as a few buffers: the size prefix and fields, and every large value
    (a Fetch's records, megabytes) as the very object the handler produced — never copied into
    one buffer, the transport sends the parts in order.

    Why: encoding into one ``BytesIO`` copied every record byte once more on the event loop.
    """

    __slots__ = ("_small", "parts")

    def __init__(self) -> None:
        self.parts: list[bytes | bytearray | memoryview] = []
        self._small = bytearray()

    def write(self, data: bytes | bytearray | memoryview | RecordViews) -> int:
        n = len(data)
        if isinstance(data, RecordViews):  # a Fetch's records as views of the cached chunks
            if self._small:
                self.parts.append(self._small)
                self._small = bytearray()
            self.parts.extend(data.parts)
            return n
        if n >= _BIG:
            if self._small:
                self.parts.append(self._small)
                self._small = bytearray()
            self.parts.append(data)
        else:
            self._small += data
        return n

    def close(self) -> None:
        if self._small:
            self.parts.append(self._small)
            self._small = bytearray()

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts) + len(self._small)

    def tobytes(self) -> bytes:
        """The whole frame as one ``bytes`` (tests, small answers)."""
        return b"".join([*self.parts, self._small])


def encode_response(correlation_id: int, resp: ResponsePayload) -> ResponseFrame:
    """The whole response frame: size prefix, header (v0, or v1 with tagged fields), body."""
    body = ResponseFrame()
    hcls = resp.__header_schema__
    header: Any = hcls(correlation_id=correlation_id)  # type: ignore[arg-type]
    out: Any = body  # kio only calls .write(); its hint names IO[bytes]
    entity_writer(hcls)(out, header)
    entity_writer(type(resp))(out, resp)
    body.close()
    prefix = struct.pack(">i", len(body))
    first = body.parts[0] if body.parts else None
    if isinstance(first, bytearray):
        first[:0] = prefix  # the small leading part (header, first fields) takes the size
    else:
        body.parts.insert(0, prefix)
    return body


def nested(cls: type[Entity], name: str) -> type[Entity]:
    """A nested struct class of the same API version as ``cls`` (kio defines them per module)."""
    got = getattr(sys.modules[cls.__module__], name)
    assert isinstance(got, type)
    return got


def has_field(cls: type[Entity], name: str) -> bool:
    return name in cls.__dataclass_fields__


def error_response(cls: type[Entity], code: ErrorCode, **given: Any) -> Any:
    """An entity of ``cls`` (a response, or one of its structs) with every error field at its top
    level set to ``code``, the ``given`` values (those of fields ``cls`` has; other versions' are
    dropped) and every other field zero, empty or null: what Kafka's ``getErrorResponse`` looks
    like for a request this endpoint refuses, and what each refused partition of one looks like."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            if f.name == "error_code":
                values[f.name] = code
            continue
        kind = f.metadata.get("kafka_type")
        if f.name == "error_code" or kind == "error_code":
            values[f.name] = code
        elif kind in ("string",):
            values[f.name] = None if "None" in str(f.type) else ""
        elif kind in ("timedelta_i32", "timedelta_i64"):
            import datetime

            values[f.name] = datetime.timedelta(0)
        elif kind in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64"):
            values[f.name] = 0
        elif kind == "bool":
            values[f.name] = False
        elif kind == "bytes" or kind == "records":
            values[f.name] = None if "None" in str(f.type) else b""
        elif kind == "uuid":
            values[f.name] = None
        else:  # arrays and structs: nothing to echo
            values[f.name] = () if "tuple" in str(f.type) else None
    return cls(**values)


def refused_topics(topic_cls: type[Entity], partition_cls: type[Entity],
                   topics: Iterable[tuple[Any, Iterable[int]]], code: ErrorCode,
                   **partition_values: Any) -> tuple[Any, ...]:
    """One ``topic_cls`` per (name, partition indexes) of ``topics``, each partition an
    :func:`error_response` of ``partition_cls`` with ``code`` and ``partition_values``: how a
    broker answers the topics of a request it refuses partition by partition (ListOffsets,
    OffsetCommit, OffsetFetch)."""
    return tuple(
        make(topic_cls, name=name, partitions=tuple(
            error_response(partition_cls, code, partition_index=i, **partition_values) for i in indexes))
        for name, indexes in topics
    )
