"""Every array length in a request checked against the bytes left, before kio decodes it.

Why: kio's native reader reserves memory for an array's declared element count before it reads
the first element, and Rust aborts the process when the reservation fails. One 30-byte Metadata
v12 frame whose topic array claims 2^32-2 elements (a 32 GiB reservation) killed the whole
endpoint process, every client with it; a legacy array of 2^31-1 (16 GiB) does the same on a
machine with less memory. Found by ``tests/security/test_fuzz_frames.py``. Kafka's own parser
refuses such a length (``MessageUtil``: an array cannot have more elements than bytes remain).

This walk reads the same fields in the same order as kio's reader (plain fields through kio's
own field readers, so the encodings are not written twice) and refuses a frame as soon as an
array claims more elements than bytes remain: every element takes at least one byte. It also
refuses a null (length -1) for an array the schema does not let be null, as Kafka's parser does:
kio reads it as None, and a handler iterating it failed with a traceback (DescribeGroups v2 with a
null ``groups``, found by the fuzzer).
"""

from __future__ import annotations

from dataclasses import Field, fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._parse import get_field_reader  # kio's own per-field readers (no public name)
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.static.protocol import Entity


class FrameBoundsError(ValueError):
    """A length in the frame claims more than the frame holds."""


@cache
def _layout(cls: type[Entity]) -> tuple[tuple[Field[Any], ...], dict[int, Field[Any]]]:
    """(untagged fields in wire order, tagged fields by tag) of an entity class."""
    plain: list[Field[Any]] = []
    tagged: dict[int, Field[Any]] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            plain.append(f)
        else:
            tagged[int(tag)] = f
    return tuple(plain), tagged


@cache
def _plain_reader(cls: type[Entity], f: Field[Any], header: bool, tagged: bool) -> Any:
    return get_field_reader(cls, f, header, tagged)


@cache
def _has_arrays(cls: type[Entity]) -> bool:
    """Whether an entity holds an array anywhere (in a nested or tagged field too)."""
    for f in fields(cls):
        kind = classify_field(f)
        if kind.is_array or (isinstance(kind, EntityField) and _has_arrays(kind.type_)):
            return True
    return False


def check_entity(cls: type[Entity], buf: bytes, at: int, end: int | None = None) -> int:
    """Walk one ``cls`` at ``buf[at:]`` (up to ``end``); the offset after it. Raises
    :class:`FrameBoundsError` for an array longer than the bytes left, kio's errors for bytes
    that do not parse."""
    end = len(buf) if end is None else end
    flexible = bool(getattr(cls, "__flexible__", False))
    plain, tagged = _layout(cls)
    for f in plain:
        at = _check_field(cls, f, buf, at, end, flexible, False)
    if not flexible:
        return at
    count, n = read_unsigned_varint(buf, at)
    at += n
    _bound(cls, "tagged fields", count, end - at)
    for _ in range(count):
        tag, n = read_unsigned_varint(buf, at)
        at += n
        size, n = read_unsigned_varint(buf, at)
        at += n
        _bound(cls, f"tagged field {tag}", size, end - at)
        known = tagged.get(tag)
        if known is not None:
            _check_field(cls, known, buf, at, at + size, flexible, True)
        at += size
    return at


def _check_field(
    cls: type[Entity], f: Field[Any], buf: bytes, at: int, end: int, flexible: bool, tagged: bool
) -> int:
    kind = classify_field(f)
    if kind.is_array and not is_optional(f):  # as Kafka: "non-nullable field ... serialized as null"
        read_length = read_compact_array_length if flexible else read_legacy_array_length
        count = read_length(buf, at)[0]
        if count is None or count < 0:  # compact null reads as None, legacy null as -1
            raise FrameBoundsError(f"{cls.__name__}.{f.name}: null for an array that cannot be null")
    if isinstance(kind, PrimitiveField):
        _, n = _plain_reader(cls, f, False, tagged)(buf, at)  # request bodies only, never a header
        return at + int(n)
    if isinstance(kind, EntityField):
        if is_optional(f):  # a nullable struct: -1 absent, else present
            marker, n = read_int8(buf, at)
            at += n
            if marker < 0:
                return at
        return check_entity(kind.type_, buf, at, end)
    read_length = read_compact_array_length if flexible else read_legacy_array_length
    start = at
    count, n = read_length(buf, at)
    at += n
    if count is None or count <= 0:
        return at
    _bound(cls, f.name, count, end - at)
    if not isinstance(kind, EntityTupleField) or not _has_arrays(kind.type_):
        # bounded now, and no array inside: kio's own reader walks the rest at native speed
        _, n = _plain_reader(cls, f, False, tagged)(buf, start)
        return start + int(n)
    for _ in range(count):  # elements that hold arrays themselves (Fetch topics: partitions)
        at = check_entity(kind.type_, buf, at, end)
    return at


def _bound(cls: type[Entity], what: str, count: int, left: int) -> None:
    if count > left:
        raise FrameBoundsError(f"{cls.__name__}.{what}: {count} claimed with {max(left, 0)} bytes left")
