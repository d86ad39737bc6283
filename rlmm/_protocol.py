"""Kafka protocol primitives for flexible ("compact", KIP-482) message versions.

Only what the ``__remote_log_metadata`` records need: unsigned varints, fixed-width big-endian
integers, uuids, compact strings, compact nullable bytes, compact arrays and tagged-field
sections. The reader is strict the way Kafka's generated readers are (negative lengths for
non-nullable fields, strings over 0x7fff bytes, lengths past the end of the buffer) and
reports every problem as :class:`ProtocolError` carrying the byte position, which the serde
turns into a :class:`rlm.errors.MetadataDecodeError` naming partition and offset.
"""

from __future__ import annotations

import struct

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

MAX_STRING_LENGTH = 0x7FFF


class ProtocolError(ValueError):
    """Malformed bytes at ``position`` (an index into the buffer being read)."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} (at byte {position})")
        self.reason = reason
        self.position = position


class Writer:
    """Appends encoded fields to one growing buffer."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def uvarint(self, value: int) -> None:
        if value < 0 or value > 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {value}")
        while value >= 0x80:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)

    def int8(self, value: int) -> None:
        self.buf += _I8.pack(value)

    def int32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def uuid(self, raw: bytes) -> None:
        if len(raw) != 16:
            raise ValueError("a uuid has 16 bytes")
        self.buf += raw

    def compact_string(self, value: str) -> None:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_LENGTH:
            raise ValueError(f"string of {len(data)} bytes is longer than {MAX_STRING_LENGTH}")
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.uvarint(0)
        else:
            self.uvarint(len(value) + 1)
            self.buf += value

    def compact_array_length(self, count: int) -> None:
        self.uvarint(count + 1)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """A tagged-field section; ``fields`` maps tag -> already encoded value."""
        if not fields:
            self.buf.append(0)
            return
        self.uvarint(len(fields))
        for tag in sorted(fields):
            value = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(value))
            self.buf += value

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Reads fields from ``data`` starting at ``pos``; every method checks bounds."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.data = bytes(data) if not isinstance(data, bytes) else data
        self.pos = pos
        self.end = len(self.data)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ProtocolError(f"truncated {what}: need {n} bytes, have {self.end - self.pos}", self.pos)
        start = self.pos
        self.pos += n
        return self.data[start:self.pos]

    def uvarint(self, what: str = "varint") -> int:
        """Kafka's ``readUnsignedVarint``: at most 5 bytes, a 32-bit unsigned value."""
        start = self.pos
        value = 0
        shift = 0
        while True:
            if self.pos >= self.end:
                raise ProtocolError(f"truncated {what}", start)
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise ProtocolError(f"{what}: varint longer than 5 bytes", start)
        if value > 0xFFFFFFFF:
            raise ProtocolError(f"{what}: varint does not fit 32 bits", start)
        return value

    def int8(self, what: str = "int8") -> int:
        return int(_I8.unpack(self._take(1, what))[0])

    def int32(self, what: str = "int32") -> int:
        return int(_I32.unpack(self._take(4, what))[0])

    def int64(self, what: str = "int64") -> int:
        return int(_I64.unpack(self._take(8, what))[0])

    def uuid(self, what: str = "uuid") -> bytes:
        return self._take(16, what)

    def compact_string(self, what: str = "string") -> str:
        start = self.pos
        length = self.uvarint(what) - 1
        if length < 0:
            raise ProtocolError(f"non-nullable field {what} was serialized as null", start)
        if length > MAX_STRING_LENGTH:
            raise ProtocolError(f"string field {what} had invalid length {length}", start)
        raw = self._take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"string field {what} is not valid UTF-8", start) from e

    def compact_nullable_bytes(self, what: str = "bytes") -> bytes | None:
        length = self.uvarint(what) - 1
        if length < 0:
            return None
        return self._take(length, what)

    def compact_array_length(self, what: str = "array") -> int:
        start = self.pos
        count = self.uvarint(what) - 1
        if count < 0:
            raise ProtocolError(f"non-nullable field {what} was serialized as null", start)
        if count > self.remaining:
            raise ProtocolError(f"array {what} claims {count} elements, only {self.remaining} bytes left",
                                start)
        return count

    def tagged_fields(self, what: str = "tagged fields") -> dict[int, bytes]:
        """Reads a tagged-field section into tag -> raw value.

        Like Kafka's generated readers, order is not enforced and a repeated tag keeps the last
        value; callers decode the tags they know and ignore the rest (forward compatibility).
        """
        start = self.pos
        count = self.uvarint(what)
        if count > self.remaining:
            raise ProtocolError(f"{what}: {count} tagged fields, only {self.remaining} bytes left", start)
        fields: dict[int, bytes] = {}
        for _ in range(count):
            tag = self.uvarint(f"{what} tag")
            size = self.uvarint(f"{what} size")
            fields[tag] = self._take(size, f"tagged field {tag}")
        return fields


def tagged_bool(raw: bytes, what: str, position: int) -> bool:
    if len(raw) != 1:
        raise ProtocolError(f"tagged field {what} has {len(raw)} bytes, expected 1", position)
    return raw[0] != 0


def tagged_int32(raw: bytes, what: str, position: int) -> int:
    if len(raw) != 4:
        raise ProtocolError(f"tagged field {what} has {len(raw)} bytes, expected 4", position)
    return int(_I32.unpack(raw)[0])


def tagged_int64(raw: bytes, what: str, position: int) -> int:
    if len(raw) != 8:
        raise ProtocolError(f"tagged field {what} has {len(raw)} bytes, expected 8", position)
    return int(_I64.unpack(raw)[0])
