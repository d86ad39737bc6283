"""Confluent-framed Protobuf values to typed columns (``iceberg.decode.format: protobuf``).

The wire format (Confluent's serializers): magic byte 0, the schema id as 4 bytes big-endian,
the message-index list, then the message's Protobuf binary. The index list says which message of
the schema's file the value is: zigzag varints, first the count then the indexes (the top-level
message's position, then nested positions); a count of 0 (the single byte ``00``, what nearly
every value carries) means ``[0]``, the file's first message.

The columns come from the subject's latest schema (:mod:`rlm.tables.protobuf_schema`): the
message ``iceberg.decode.message`` names, else the file's first. A record may be written under
any schema id whose indexed message has the same full name (an older or newer version): its
fields fill the columns by name, as Avro's do (a field the writer lacks is null).

A batch is decoded without a Python step per record wherever compiled code can do it:

* the frame and the ids are checked with Arrow kernels for the batch; only a value whose index
  list is not the single ``00`` byte has its list read in Python;
* the payloads of one (schema id, index path) go to the parser in **one** call, by one of two
  engines giving the same columns:

  - ``ptars`` (Protobuf to Arrow in compiled Rust; the ``iceberg`` extra installs it): the
    payloads as an Arrow binary array in, a record batch out, which is then conformed to the
    columns (struct members by name, safe casts: an unsigned 64-bit value above 2^63 - 1 is
    refused);
  - ``upb`` (the protobuf runtime, used when ptars is not installed): one ``ParseFromString``
    of the payloads as the repeated field of a wrapper message built in the schema's descriptor
    pool (joined with their length prefixes by Arrow kernels), then each column taken from the
    parsed messages with ``map(attrgetter(name), ...)`` (C iteration), repeated fields and maps
    flattened with ``itertools.chain``, timestamps and enums converted with numpy, one Arrow
    call per column;

  a payload that does not parse fails the whole call, which is then split in halves until the
  culprits are alone (a bad record costs a few extra parses, good data one).

Dead letters (each with its reason): no frame or a bad magic byte, an unknown schema id, an id
of another type (``schema id N is AVRO, not PROTOBUF``), a schema that does not compile, a bad
message-index list or an index outside the file, a message of another type than the table's, a
payload that does not parse, a value that does not fit its column (a ``uint64`` above 2^63 - 1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter, methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from rlm.config import ValueDecodeConfig
from rlm.tables.decoded import (
    DecodeConfigError,
    Decoded,
    arrow_fields,
    columns_beside_kafka,
    framing_error,
    null_failed,
    required_errors,
)
from rlm.tables.protobuf_schema import (
    TIMESTAMP,
    ProtobufSchemaError,
    Source,
    build_pool,
    columns_from_message,
    compile_files,
    is_map,
    is_repeated,
    message_by_index,
    type_name,
)
from rlm.tables.registry import SchemaRegistry, WriterSchema

log = structlog.get_logger(__name__)

_MAX_REFERENCES = 256
_WRAPPER_NAME = re.compile(r"Error parsing message with type '[^']*': ")
_PTARS_PREFIX = re.compile(r"^failed to decode Protobuf message: ")


class _Unfit(Exception):
    """A parsed message does not fit the columns."""


class _Mismatch(_Unfit):
    """A column ptars built in another kind of type than the table's (struct, list, map...)."""


class _Corrupt(Exception):
    """A payload that does not parse as its message."""


def _ptars() -> Any:
    """The ``ptars`` module (Protobuf to Arrow in compiled Rust), or None when not installed."""
    try:
        import ptars
    except ImportError:
        return None
    return ptars


def _ptars_handler(schema: _Schema, full_name: str) -> Any:
    hit = schema.handlers.get(full_name)
    if hit is not None:
        return hit
    ptars = _ptars()
    desc = schema.pool.FindMessageTypeByName(full_name)
    config = ptars.PtarsConfig(timestamp_unit="us", enum_repr="string")
    handler = ptars.HandlerPool([desc.file], config=config).get_for_message(desc)
    schema.handlers[full_name] = handler
    return handler


@dataclass(slots=True)
class _Schema:
    """One schema id, compiled: its pool, its root file, and the wrapper class per message."""

    schema_id: int
    pool: Any
    root: Any  # the root FileDescriptorProto
    wrappers: dict[str, Any]  # message full name -> class of ``Batch { repeated M m = 1; }``
    handlers: dict[str, Any] = field(default_factory=dict)  # message full name -> ptars handler


def load_schema(registry: SchemaRegistry, ws: WriterSchema) -> _Schema:
    """Schema ``ws`` with every schema it references (recursively, through the registry),
    compiled into a pool of its own. :class:`ProtobufSchemaError` when it cannot be."""
    sources = [Source(f"schema_{ws.schema_id}.proto", ws.text, [r.name for r in ws.references])]
    todo = list(ws.references)
    seen: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref.name in seen:
            continue
        seen.add(ref.name)
        if len(seen) > _MAX_REFERENCES:
            raise ProtobufSchemaError(f"more than {_MAX_REFERENCES} references")
        target = registry.version(ref.subject, ref.version)  # SchemaRegistryError stops the pass
        if target is None:
            raise ProtobufSchemaError(f"reference {ref.name!r}: the registry has no version "
                                      f"{ref.version} of subject {ref.subject!r}")
        sources.append(Source(ref.name, target.text, [r.name for r in target.references]))
        todo.extend(target.references)
    files = compile_files(sources)
    root = next(f for f in files if f.name == sources[0].name)
    return _Schema(ws.schema_id, build_pool(files), root, {})


def _wrapper(schema: _Schema, full_name: str) -> Any:
    """The class of a message ``Batch { repeated <full_name> m = 1; }`` added to the schema's pool:
    parsing the concatenation of ``0x0A, varint length, payload`` for each value decodes them all."""
    hit = schema.wrappers.get(full_name)
    if hit is not None:
        return hit
    from google.protobuf import descriptor_pb2, message_factory

    owner = schema.pool.FindMessageTypeByName(full_name).file.name
    fdp = descriptor_pb2.FileDescriptorProto(name=f"rlm_batch_{len(schema.wrappers)}.proto",
                                             package=f"rlm_batch_{len(schema.wrappers)}",
                                             dependency=[owner], syntax="proto3")
    msg = fdp.message_type.add(name="Batch")
    msg.field.add(name="m", number=1, label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                  type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, type_name="." + full_name)
    schema.pool.AddSerializedFile(fdp.SerializeToString())
    cls = message_factory.GetMessageClass(schema.pool.FindMessageTypeByName(f"{fdp.package}.Batch"))
    schema.wrappers[full_name] = cls
    return cls


def read_index_list(v: bytes) -> tuple[list[int], int] | str:
    """Confluent's message-index list after the 5-byte header of ``v``: (the path, the payload's
    start), or why it does not read."""
    pos, out = 5, []

    def varint() -> int | None:
        nonlocal pos
        shift, value = 0, 0
        while pos < len(v) and shift < 64:
            b = v[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)  # zigzag
        return None

    count = varint()
    if count is None:
        return "bad message-index list (truncated)"
    if count == 0:
        return [0], pos
    if count < 0 or count > len(v) - pos:
        return f"bad message-index list (count {count})"
    for _ in range(count):
        i = varint()
        if i is None:
            return "bad message-index list (truncated)"
        out.append(i)
    return out, pos


class ProtobufDecoder:
    """Confluent-framed Protobuf (see the module docstring)."""

    #: ``ptars`` (compiled, a batch to Arrow in one call) when installed, else ``upb`` (one
    #: ``ParseFromString`` per batch, the columns taken in Python); the two give the same columns
    engine_default: str = "ptars" if _ptars() is not None else "upb"

    def __init__(self, cfg: ValueDecodeConfig, registry: SchemaRegistry | None = None,
                 engine: str | None = None) -> None:
        assert cfg.schema_registry is not None and cfg.subject is not None
        self.engine = engine or self.engine_default
        self.registry = registry or SchemaRegistry(cfg.schema_registry)
        self._schemas: dict[int, _Schema | str] = {}  # schema id -> compiled, or why not
        ws = self.registry.latest(cfg.subject)
        where = f"iceberg.decode.subject {cfg.subject!r}"
        if ws is None:
            raise DecodeConfigError(f"{where}: the registry has no such subject")
        if ws.schema_type != "PROTOBUF":
            raise DecodeConfigError(f"{where}: its latest schema (id {ws.schema_id}) is {ws.schema_type}, "
                                    "not PROTOBUF")
        try:
            latest = load_schema(self.registry, ws)
        except ProtobufSchemaError as e:
            raise DecodeConfigError(f"{where}: schema id {ws.schema_id} does not compile: {e}") from e
        self._schemas[ws.schema_id] = latest
        name = cfg.message or message_by_index(latest.root, [0])
        try:
            desc = latest.pool.FindMessageTypeByName(name)
        except KeyError:
            desc = None
        if desc is None:
            raise DecodeConfigError(f"{where}: schema id {ws.schema_id} has no message {name!r}")
        self.message: str = desc.full_name
        cols = columns_from_message(desc)
        fields = columns_beside_kafka(cols.fields, cols.skipped, where=where,
                                      what=f"field of {self.message}", event="protobuf_fields_left_out",
                                      subject=cfg.subject, message=self.message)
        self.cfg = cfg.model_copy(update={"fields": fields})
        self.arrow_schema = arrow_fields(self.cfg)
        self.parses = 0

    # ---- schema ids ------------------------------------------------------------------------
    def _schema(self, schema_id: int) -> _Schema | str:
        hit = self._schemas.get(schema_id)
        if hit is not None:
            return hit
        ws = self.registry.get(schema_id)  # SchemaRegistryError (no answer) stops the pass
        out: _Schema | str
        if ws is None:
            out = f"unknown schema id {schema_id} (the registry has no such id)"
        elif ws.schema_type != "PROTOBUF":
            out = f"schema id {schema_id} is {ws.schema_type}, not PROTOBUF"
        else:
            try:
                out = load_schema(self.registry, ws)
            except ProtobufSchemaError as e:
                out = f"schema id {schema_id} does not compile: {e}"
        self._schemas[schema_id] = out  # each id looked up once
        return out

    def _message(self, schema_id: int, path: tuple[int, ...]) -> tuple[_Schema, Any] | str:
        """The schema and the wrapper class for records of ``schema_id`` at index ``path``."""
        s = self._schema(schema_id)
        if isinstance(s, str):
            return s
        name = message_by_index(s.root, list(path))
        if name is None:
            return (f"message index {list(path)} is outside schema id {schema_id} "
                    f"({len(s.root.message_type)} top-level message(s))")
        if name != self.message:
            return f"message {name} (schema id {schema_id}) is not the table's {self.message}"
        return s, _wrapper(s, name)

    # ---- a batch ---------------------------------------------------------------------------
    def decode(self, values: pa.Array) -> Decoded:
        n = len(values)
        values = values.cast(pa.binary())
        present = pc.is_valid(values).to_numpy(zero_copy_only=False)
        lengths = pc.binary_length(values).fill_null(0).to_numpy(zero_copy_only=False)
        magic = pc.binary_slice(values, 0, 1)
        framed = (pc.equal(magic, pa.scalar(b"\0")).fill_null(False).to_numpy(zero_copy_only=False)
                  & (lengths >= 6))
        head = pc.if_else(framed, pc.binary_slice(values, 1, 6), pa.scalar(b"\0\0\0\0\0"))
        fixed = head.cast(pa.binary(5))
        raw = np.frombuffer(fixed.buffers()[1], dtype=np.uint8, count=5 * n,
                            offset=5 * fixed.offset).reshape(n, 5)
        ids = raw[:, :4].copy().view(">u4").reshape(n).astype(np.int64)
        errors: dict[int, str] = {}
        schema_ids: dict[int, int] = {}
        for i in np.flatnonzero(present & ~framed).tolist():
            v = values[i].as_py()
            errors[i] = (framing_error(v) if len(v) != 5 or v[0] != 0
                         else "not Confluent Protobuf wire format (no message-index list)")
            if len(v) == 5 and v[0] == 0:
                schema_ids[i] = int.from_bytes(v[1:5], "big")
        # rows by (schema id, index path, payload start): the common index list is the one 00 byte
        groups: dict[tuple[int, tuple[int, ...], int], list[int]] = {}
        simple = framed & (raw[:, 4] == 0)
        for sid in np.unique(ids[simple]).tolist():
            groups[(sid, (0,), 6)] = np.flatnonzero(simple & (ids == sid)).tolist()
        for i in np.flatnonzero(framed & ~simple).tolist():
            sid = int(ids[i])
            read = read_index_list(values[i].as_py())
            if isinstance(read, str):
                errors[i] = read
                schema_ids[i] = sid
            else:
                groups.setdefault((sid, tuple(read[0]), read[1]), []).append(i)
        parts: list[tuple[np.ndarray[Any, Any], list[pa.Array]]] = []
        for (sid, path, start), rows in groups.items():
            schema_ids.update(dict.fromkeys(rows, sid))
            found = self._message(sid, path)
            if isinstance(found, str):
                errors.update(dict.fromkeys(rows, found))
                continue
            schema, cls = found
            at = np.asarray(rows, dtype=np.int64)
            payloads = pc.binary_slice(values.take(pa.array(at)), start, (1 << 31) - 1)
            self._parse(schema, cls, payloads, at, parts, errors)
        columns = self._assemble(n, parts)
        required_errors(self.cfg, columns, pa.array(present), errors)
        return Decoded(null_failed(columns, set(errors), n), errors, schema_ids)

    def _parse(self, schema: _Schema, cls: Any, chunk: pa.Array, rows: np.ndarray[Any, Any],
               out: list[tuple[np.ndarray[Any, Any], list[pa.Array]]], errors: dict[int, str]) -> None:
        """Parse ``chunk`` (the payloads of ``rows``) in one call and take the columns; on failure
        split in halves down to the records that fail."""
        if len(chunk) == 0:
            return
        name = cls.DESCRIPTOR.fields_by_name["m"].message_type.full_name
        try:
            if self.engine == "ptars":
                out.append((rows, self._columns_ptars(_ptars_handler(schema, name), cls, chunk)))
            else:
                out.append((rows, self._columns(cls, _length_prefixed(chunk))))
            return
        except _Unfit as e:
            reason = f"decoded message does not fit the columns: {e}"
        except _Corrupt as e:
            reason = f"corrupt Protobuf payload for schema id {schema.schema_id} ({name}): {e}"
        if len(chunk) == 1:
            errors[int(rows[0])] = reason
            return
        half = len(chunk) // 2
        self._parse(schema, cls, chunk.slice(0, half), rows[:half], out, errors)
        self._parse(schema, cls, chunk.slice(half), rows[half:], out, errors)

    def _columns_ptars(self, handler: Any, cls: Any, chunk: pa.Array) -> list[pa.Array]:
        """The batch to Arrow in one compiled call (ptars), then conformed to the columns. A column
        ptars builds in a type of its own (it turns well-known messages such as
        ``google.protobuf.Int64Value`` or ``Duration`` into scalars) is taken the ``upb`` way
        instead, so that both engines give the same columns."""
        self.parses += 1
        try:
            batch = handler.array_to_record_batch(chunk)
        except ValueError as e:  # ptars: "failed to decode Protobuf message: <why>"
            raise _Corrupt(_PTARS_PREFIX.sub("", str(e))) from e
        names = batch.schema.names
        out: list[pa.Array] = []
        msgs: list[Any] | None = None
        for f in self.arrow_schema:
            if f.name not in names:
                out.append(pa.nulls(len(chunk), f.type))
                continue
            try:
                out.append(_conform(batch.column(f.name), f.type, f.name))
                continue
            except _Mismatch:
                pass
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise _Unfit(str(e)) from e
            if msgs is None:
                msgs = self._messages(cls, _length_prefixed(chunk))
            out.append(self._take(msgs, f))
        return out

    def _messages(self, cls: Any, chunk: pa.Array) -> list[Any]:
        """``chunk`` (length-prefixed payloads) parsed by one ``ParseFromString`` of the wrapper."""
        from google.protobuf.message import DecodeError

        one = pa.ListArray.from_arrays(pa.array([0, len(chunk)], pa.int32()), chunk)
        data = pc.binary_join(one, b"")[0].as_py()
        batch = cls()
        try:
            batch.ParseFromString(data)
        except DecodeError as e:  # upb's parser: a payload that is not this message's encoding
            raise _Corrupt(_WRAPPER_NAME.sub("", str(e)) or type(e).__name__) from e  # the wrapper is ours
        msgs = list(batch.m)
        if len(msgs) != len(chunk):  # cannot happen: each payload is one length-delimited field
            raise ValueError(f"{len(msgs)} messages parsed from {len(chunk)} payloads")
        return msgs

    def _take(self, msgs: list[Any], f: pa.Field) -> pa.Array:
        try:
            return _column(msgs, msgs[0].DESCRIPTOR.fields_by_name.get(f.name), f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as e:
            raise _Unfit(str(e)) from e

    def _columns(self, cls: Any, chunk: pa.Array) -> list[pa.Array]:
        self.parses += 1
        msgs = self._messages(cls, chunk)
        return [self._take(msgs, f) for f in self.arrow_schema]

    def _assemble(self, n: int, parts: list[tuple[np.ndarray[Any, Any], list[pa.Array]]]) -> list[pa.Array]:
        """The groups' columns scattered back to their rows (nulls elsewhere)."""
        if not parts:
            return [pa.nulls(n, f.type) for f in self.arrow_schema]
        rows = np.concatenate([r for r, _ in parts])
        where = np.full(n, -1, dtype=np.int64)
        where[rows] = np.arange(len(rows), dtype=np.int64)
        take = pa.array(where, mask=where < 0)
        return [pa.concat_arrays([cols[j] for _, cols in parts]).take(take)
                for j in range(len(self.arrow_schema))]


def _length_prefixed(payloads: pa.Array) -> pa.Array:
    """Each payload as field 1 of a wrapper message: ``0x0A``, its length as a varint, the bytes."""
    lengths = pc.binary_length(payloads).to_numpy(zero_copy_only=False).astype(np.uint64)
    n = len(lengths)
    width = 1 + sum((lengths >= (1 << (7 * k))).astype(np.int64) for k in range(1, 5))  # varint bytes
    mat = np.zeros((n, 6), dtype=np.uint8)
    mat[:, 0] = 0x0A
    for k in range(5):
        more = (width > k + 1).astype(np.uint8) << 7
        mat[:, k + 1] = ((lengths >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | more
    keep = np.arange(6)[None, :] < (width + 1)[:, None]
    data = mat[keep]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(width + 1, out=offsets[1:])
    prefixes = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pc.binary_join_element_wise(prefixes, payloads, b"")


def _conform(col: pa.Array, t: pa.DataType, name: str) -> pa.Array:
    """A column as ptars built it (the writer's message) in the table's type ``t``: struct
    members and map/list values by name and recursively, scalars cast (safely: an unsigned
    64-bit value above 2^63 - 1 does not fit a long)."""
    if pa.types.is_struct(t):
        if not pa.types.is_struct(col.type):
            raise _Mismatch(f"field {name} is {col.type}, the column is {t}")
        have = {col.type.field(i).name for i in range(col.type.num_fields)}
        kids = [_conform(col.field(f.name), f.type, f"{name}.{f.name}") if f.name in have
                else pa.nulls(len(col), f.type) for f in t]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=col.is_null())
    if pa.types.is_map(t):
        if not pa.types.is_map(col.type):
            raise _Mismatch(f"field {name} is {col.type}, the column is {t}")
        keys = _conform(col.keys, t.key_type, name + ".key")
        items = _conform(col.items, t.item_type, name + ".value")
        return pa.MapArray.from_arrays(col.offsets, keys, items, type=t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not pa.types.is_list(col.type):
            raise _Mismatch(f"field {name} is {col.type}, the column is {t}")
        values = _conform(col.values, t.value_type, name)
        mask = col.is_null() if col.null_count else None
        if pa.types.is_large_list(t):
            return pa.LargeListArray.from_arrays(col.offsets.cast(pa.int64()), values, type=t, mask=mask)
        return pa.ListArray.from_arrays(col.offsets, values, type=t, mask=mask)
    if pa.types.is_nested(col.type):
        raise _Mismatch(f"field {name} is {col.type}, the column is {t}")
    if pa.types.is_uint64(col.type) and pa.types.is_int64(t) and len(col) and (
            pc.max(col).as_py() or 0) > (1 << 63) - 1:
        raise _Unfit(f"field {name.rsplit('.', 1)[-1]}: an unsigned 64-bit value above 2^63 - 1 does "
                     "not fit a long column")
    return col.cast(t)


# ---- columns from parsed messages --------------------------------------------------------------
def _column(msgs: Sequence[Any], fd: Any, t: pa.DataType) -> pa.Array:
    """Field ``fd`` of each of ``msgs`` as an array of ``t`` (``fd`` None: the writer's message
    has no such field, the column is null)."""
    if fd is None:
        return pa.nulls(len(msgs), t)
    vals = list(map(attrgetter(fd.name), msgs))
    if is_map(fd):
        if not pa.types.is_map(t):
            raise _Unfit(f"field {fd.name} is a map, the column is {t}")
        entry = fd.message_type
        items = list(chain.from_iterable(map(methodcaller("items"), vals)))
        keys = _values(list(map(itemgetter(0), items)), entry.fields_by_name["key"], t.key_type)
        values = _values(list(map(itemgetter(1), items)), entry.fields_by_name["value"], t.item_type)
        offsets = _offsets(vals)
        return pa.MapArray.from_arrays(offsets, keys, values, type=t)
    if is_repeated(fd):
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise _Unfit(f"field {fd.name} is repeated, the column is {t}")
        flat = list(chain.from_iterable(vals))
        child = _values(flat, fd, t.value_type)
        offsets = _offsets(vals)
        if pa.types.is_large_list(t):
            return pa.LargeListArray.from_arrays(offsets.cast(pa.int64()), child, type=t)
        return pa.ListArray.from_arrays(offsets, child, type=t)
    arr = _values(vals, fd, t)
    if fd.has_presence:
        has = np.fromiter(map(methodcaller("HasField", fd.name), msgs), dtype=bool, count=len(msgs))
        if not has.all():
            if pa.types.is_struct(arr.type):
                assert isinstance(arr, pa.StructArray)
                return pa.StructArray.from_arrays(arr.flatten(), fields=list(arr.type), mask=pa.array(~has))
            return pc.if_else(pa.array(has), arr, pa.nulls(len(arr), arr.type))
    return arr


def _offsets(containers: list[Any]) -> pa.Array:
    lengths = np.fromiter(map(len, containers), dtype=np.int64, count=len(containers))
    offsets = np.zeros(len(containers) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        raise _Unfit("more than 2^31 elements in one batch")
    return pa.array(offsets.astype(np.int32))


_TS = attrgetter("seconds"), attrgetter("nanos")


def _values(vals: list[Any], fd: Any, t: pa.DataType) -> pa.Array:
    """Single values of field ``fd`` (the elements, for a repeated one) as an array of ``t``."""
    kind = type_name(fd)
    n = len(vals)
    if kind in ("TYPE_MESSAGE", "TYPE_GROUP"):
        if fd.message_type.full_name == TIMESTAMP:
            if not pa.types.is_timestamp(t):
                raise _Unfit(f"field {fd.name} is a Timestamp, the column is {t}")
            secs = np.fromiter(map(_TS[0], vals), dtype=np.int64, count=n)
            nanos = np.fromiter(map(_TS[1], vals), dtype=np.int64, count=n)
            return pa.array(secs * 1_000_000 + nanos // 1000, pa.timestamp("us", "UTC")).cast(t)
        if not pa.types.is_struct(t):
            raise _Unfit(f"field {fd.name} is a message, the column is {t}")
        desc = fd.message_type
        children = [_column(vals, desc.fields_by_name.get(t.field(i).name), t.field(i).type)
                    for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t))
    if kind == "TYPE_ENUM":
        numbers = np.fromiter(vals, dtype=np.int64, count=n)
        uniq, inverse = np.unique(numbers, return_inverse=True)
        names = {v.number: v.name for v in fd.enum_type.values}
        return pa.array([names.get(int(u), str(u)) for u in uniq], t).take(pa.array(inverse))
    if kind in ("TYPE_UINT64", "TYPE_FIXED64"):
        try:
            return pa.array(vals, t)
        except (OverflowError, pa.ArrowInvalid):
            raise _Unfit(f"field {fd.name}: an unsigned 64-bit value above 2^63 - 1 does not fit a "
                         "long column") from None
    return pa.array(vals, t)
