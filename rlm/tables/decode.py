"""Record values to typed columns (``iceberg.decode``): JSON objects, Confluent-framed Avro, or
Confluent-framed JSON under a registry's JSON Schema.

A decoder takes a batch of values (an Arrow binary array) and answers, for the whole batch, the
decoded columns (one Arrow array per configured field, null where a row did not decode) and, per
row that did not decode, the reason. It never drops a row: the writer sends each failed row to the
dead-letter table (:mod:`rlm.tables.deadletter`). A null value (a tombstone) decodes to
null columns, not to a dead letter.

* **JSON** is parsed a batch at a time by Arrow's JSON reader against the configured schema
  (values joined by newlines; raw line breaks inside a value, legal only as JSON whitespace,
  become spaces first). When a batch fails (a value that is not an object, or a member of the
  wrong type), it is split in halves until the failing values are alone: the common case of
  good data costs one C++ parse per batch, and a bad record costs a few extra parses.
* **Avro** values are in Confluent's wire format: magic byte 0, the writer schema's id as 4
  bytes big-endian, then Avro binary. The writer schema comes from the registry
  (:mod:`rlm.tables.registry`), fastavro reads the record, and the configured fields are
  taken from it by name (the columns are the reader's view; fields the writer schema lacks are
  null). Arrow then builds the columns from the batch of records in one call.
* **JSON Schema** values are Confluent-framed JSON text: the frame is checked with Arrow kernels
  for the batch, each schema id looked up once, and the texts parsed as JSON above
  (:class:`JsonSchemaDecoder`); the columns may come from a subject's JSON Schema
  (:mod:`rlm.tables.json_schema`).

``required`` fields are checked after decoding: a decoded record where one is null is a dead
letter. Fields of the table are always optional in Iceberg (tombstones have no fields).
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import structlog

from rlm.config import ValueDecodeConfig
from rlm.tables.decoded import (
    DecodeConfigError,
    Decoded,
    Decoder,
    arrow_fields,
    columns_beside_kafka,
    framing_error,
    null_failed,
    required_errors,
)
from rlm.tables.json_schema import columns_from_json_schema
from rlm.tables.registry import SchemaRegistry

log = structlog.get_logger(__name__)

_ROW = re.compile(r" in row (\d+)$")


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` with large lists/strings/binaries as plain ones and no field metadata: what Arrow's
    JSON reader converts to (PyIceberg's Arrow schema uses the large types)."""
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_plain(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _plain(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_date(t):
        return pa.timestamp("s")  # ISO dates parse as midnight timestamps
    return t


# ---- JSON --------------------------------------------------------------------------------------
class JsonDecoder:
    """JSON objects, a batch per Arrow parse (see the module docstring).

    Each value is parsed as ``{"v": <value>}``: a value that is not exactly one JSON object (a
    number, an array, two objects, whitespace, a truncated text) then fails to parse or shows up
    as a second top-level member, so a batch's rows can never shift against its values.
    """

    def __init__(self, cfg: ValueDecodeConfig) -> None:
        self.cfg = cfg
        self.arrow_schema = arrow_fields(cfg)
        # arrow's JSON reader takes plain types (no large lists, dates as timestamps): parse into
        # those, cast after; members not configured are inferred (and then left out)
        self._value_type = pa.struct([pa.field(f.name, _plain(f.type)) for f in self.arrow_schema])
        self._options = pajson.ParseOptions(explicit_schema=pa.schema([pa.field("v", self._value_type)]),
                                            unexpected_field_behavior="infer")
        self.parses = 0

    def decode(self, values: pa.Array) -> Decoded:
        n = len(values)
        values = values.cast(pa.binary())
        present = pc.is_valid(values)
        rows = pc.indices_nonzero(present)
        errors: dict[int, str] = {}
        good: list[tuple[pa.Array, pa.Array]] = []
        text = pc.replace_substring(pc.replace_substring(values.take(rows), b"\n", b" "), b"\r", b" ")
        self._parse(pc.binary_join_element_wise(b'{"v":', text, b"}", b""), rows, good, errors)
        columns = self._assemble(n, good, errors)
        required_errors(self.cfg, columns, present, errors)
        return Decoded(null_failed(columns, set(errors), n), errors)

    def _parse(self, lines: pa.Array, rows: pa.Array, out: list[tuple[pa.Array, pa.Array]],
               errors: dict[int, str]) -> None:
        """Parse ``lines`` (rows ``rows`` of the batch) in one go, else bisect down to the culprits."""
        if len(lines) == 0:
            return
        try:
            table = self._read(lines)
            if table.num_rows == len(lines) and table.num_columns == 1:
                out.append((rows, _project(table.column(0).combine_chunks(), self._value_type)))
                return
            reason = "not one JSON object"
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            reason = str(e)
        if len(lines) == 1:
            errors[rows[0].as_py()] = f"JSON does not decode: {_ROW.sub('', reason)}"
            return
        at = _ROW.search(reason)  # a parse error names its line: the rows before it are fine
        if at is not None and 0 <= int(at.group(1)) < len(lines):
            bad = int(at.group(1))
            errors[rows[bad].as_py()] = f"JSON does not decode: {_ROW.sub('', reason)}"
            self._parse(lines.slice(0, bad), rows.slice(0, bad), out, errors)
            self._parse(lines.slice(bad + 1), rows.slice(bad + 1), out, errors)
            return
        half = len(lines) // 2
        self._parse(lines.slice(0, half), rows.slice(0, half), out, errors)
        self._parse(lines.slice(half), rows.slice(half), out, errors)

    def _read(self, lines: pa.Array) -> pa.Table:
        self.parses += 1
        one = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
        text = pc.binary_join(one, b"\n")[0].as_buffer()
        # one block: a parse error's row number is then the line's index in ``lines``
        opts = pajson.ReadOptions(block_size=max(1 << 20, text.size + 1), use_threads=len(lines) > 1000)
        return pajson.read_json(pa.BufferReader(text), parse_options=self._options, read_options=opts)

    def _assemble(self, n: int, parts: list[tuple[pa.Array, pa.Array]],
                  errors: dict[int, str]) -> list[pa.Array]:
        """Scatter the parsed rows back to their places in the batch (nulls elsewhere); a JSON
        ``null`` is not an object."""
        if not parts:
            return [pa.nulls(n, f.type) for f in self.arrow_schema]
        rows = pa.concat_arrays([r.cast(pa.int64()) for r, _ in parts])
        objs = pa.concat_arrays([a for _, a in parts])
        for j in pc.indices_nonzero(pc.is_null(objs)).to_pylist():
            errors[rows[j].as_py()] = "JSON does not decode: null, not an object"
        where = np.full(n, -1, dtype=np.int64)
        where[rows.to_numpy()] = np.arange(len(rows), dtype=np.int64)
        take = pa.array(where, mask=where < 0)
        try:
            return [c.take(take).cast(f.type) for c, f in zip(objs.flatten(), self.arrow_schema, strict=True)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:  # e.g. a date with a time part
            raise DecodeConfigError(f"iceberg.decode: a decoded column does not convert: {e}") from e


def _project(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` reduced to type ``t``'s members (the JSON reader adds the members it inferred)."""
    if pa.types.is_struct(t):
        assert isinstance(arr, pa.StructArray)
        children = [_project(arr.field(t.field(i).name), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
    if pa.types.is_list(t):
        assert isinstance(arr, pa.ListArray)
        return pa.ListArray.from_arrays(arr.offsets, _project(arr.values, t.value_type), mask=arr.is_null())
    return arr


# ---- Avro through a Schema Registry ------------------------------------------------------------
class AvroDecoder:
    """Confluent-framed Avro: writer schema by id from the registry, read by fastavro."""

    def __init__(self, cfg: ValueDecodeConfig, registry: SchemaRegistry | None = None) -> None:
        import fastavro  # the iceberg extra

        assert cfg.schema_registry is not None
        self.cfg = cfg
        self.arrow_schema = arrow_fields(cfg)
        self._struct = pa.struct(list(self.arrow_schema))
        self.registry = registry or SchemaRegistry(cfg.schema_registry)
        self._fastavro = fastavro
        self._parsed: dict[int, Any] = {}

    def _writer_schema(self, schema_id: int) -> tuple[Any, str | None]:
        if schema_id in self._parsed:
            return self._parsed[schema_id], None
        ws = self.registry.get(schema_id)  # SchemaRegistryError (no answer) stops the pass
        if ws is None:
            return None, f"unknown schema id {schema_id} (the registry has no such id)"
        if ws.schema_type != "AVRO":
            return None, f"schema id {schema_id} is {ws.schema_type}, not AVRO"
        try:
            parsed = self._fastavro.parse_schema(json.loads(ws.text))
        except (ValueError, TypeError, KeyError) as e:
            return None, f"schema id {schema_id} does not parse as Avro: {e}"
        self._parsed[schema_id] = parsed
        return parsed, None

    def decode(self, values: pa.Array) -> Decoded:
        n = len(values)
        records: list[dict[str, Any] | None] = [None] * n
        errors: dict[int, str] = {}
        ids: dict[int, int] = {}
        reader = self._fastavro.schemaless_reader
        for i, v in enumerate(values.cast(pa.binary()).to_pylist()):
            if v is None:
                continue
            if len(v) < 5 or v[0] != 0:
                errors[i] = (f"not Confluent wire format (magic byte {v[0]})" if v
                             else "not Confluent wire format (empty value)")
                continue
            sid = int.from_bytes(v[1:5], "big")
            ids[i] = sid
            schema, why = self._writer_schema(sid)
            if why is not None:
                errors[i] = why
                continue
            buf = io.BytesIO(v[5:])
            try:
                rec = reader(buf, schema, None)
            except Exception as e:  # fastavro raises many kinds for corrupt input
                errors[i] = f"corrupt Avro payload for schema id {sid}: {type(e).__name__}: {e}"
                continue
            if buf.tell() != len(v) - 5:
                left = len(v) - 5 - buf.tell()
                errors[i] = f"corrupt Avro payload for schema id {sid}: {left} bytes left over"
                continue
            if not isinstance(rec, dict):
                errors[i] = f"schema id {sid} is not an Avro record"
                continue
            records[i] = rec  # Arrow takes the configured fields by name (missing: null; others: left out)
        columns = self._columns(records, errors)
        present = pc.is_valid(values)
        required_errors(self.cfg, columns, present, errors)
        return Decoded(null_failed(columns, set(errors), n), errors, ids)

    def _columns(self, records: list[dict[str, Any] | None], errors: dict[int, str]) -> list[pa.Array]:
        """One Arrow call for the batch; a record that does not fit the columns is found alone."""
        try:
            arr = pa.array(records, type=self._struct)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            fitted: list[dict[str, Any] | None] = []
            for i, rec in enumerate(records):
                if rec is not None:
                    try:
                        pa.array([rec], type=self._struct)
                    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                        errors[i] = f"decoded record does not fit the columns: {e}"
                        rec = None
                fitted.append(rec)
            arr = pa.array(fitted, type=self._struct)
        return list(arr.flatten())  # flatten: a null record's fields are null


# ---- JSON Schema through a Schema Registry -----------------------------------------------------
def columns_from_subject(cfg: ValueDecodeConfig, registry: SchemaRegistry) -> ValueDecodeConfig:
    """``cfg`` with its ``fields`` from the latest JSON Schema of ``cfg.subject`` (when it lists none)."""
    if cfg.fields or cfg.subject is None:
        return cfg
    ws = registry.latest(cfg.subject)
    if ws is None:
        raise DecodeConfigError(f"iceberg.decode.subject {cfg.subject!r}: the registry has no such subject")
    if ws.schema_type != "JSON":
        raise DecodeConfigError(f"iceberg.decode.subject {cfg.subject!r}: its latest schema (id "
                                f"{ws.schema_id}) is {ws.schema_type}, not JSON")
    try:
        doc = json.loads(ws.text)
    except ValueError as e:
        raise DecodeConfigError(f"iceberg.decode.subject {cfg.subject!r}: schema id {ws.schema_id} "
                                f"is not JSON: {e}") from e
    where = f"iceberg.decode.subject {cfg.subject!r} (schema id {ws.schema_id})"
    cols = columns_from_json_schema(doc, where=where)
    fields = columns_beside_kafka(
        cols.fields, cols.skipped, where=f"iceberg.decode.subject {cfg.subject!r}",
        what=f"property of schema id {ws.schema_id}", event="json_schema_properties_left_out",
        subject=cfg.subject, schema_id=ws.schema_id)
    return cfg.model_copy(update={"fields": fields})


class JsonSchemaDecoder:
    """Confluent-framed JSON (magic byte 0, 4-byte schema id, JSON text) whose schema id names a
    JSON Schema in the registry.

    The frame is checked and the ids read for the whole batch with Arrow kernels; each distinct id
    is looked up once (the registry client caches it for the process); the JSON texts after the
    frame are then parsed a batch at a time by :class:`JsonDecoder` against the columns (from
    ``fields``, or from the subject's latest JSON Schema: :func:`columns_from_subject`). A record
    under any JSON schema id fills the columns by member name, as Avro's do by field name; a
    member of the wrong type, a text that is not one JSON object, an unknown id, an id of
    another schema type, or a missing required property makes a dead letter.
    """

    def __init__(self, cfg: ValueDecodeConfig, registry: SchemaRegistry | None = None) -> None:
        assert cfg.schema_registry is not None
        self.registry = registry or SchemaRegistry(cfg.schema_registry)
        self.cfg = columns_from_subject(cfg, self.registry)
        self.json = JsonDecoder(self.cfg)
        self.arrow_schema = self.json.arrow_schema
        self._known: set[int] = set()

    def _check(self, schema_id: int) -> str | None:
        """Why records under ``schema_id`` cannot decode (None: they can)."""
        if schema_id in self._known:
            return None
        ws = self.registry.get(schema_id)  # SchemaRegistryError (no answer) stops the pass
        if ws is None:
            return f"unknown schema id {schema_id} (the registry has no such id)"
        if ws.schema_type != "JSON":
            return f"schema id {schema_id} is {ws.schema_type}, not JSON"
        try:
            json.loads(ws.text)
        except ValueError as e:
            return f"schema id {schema_id} is not a JSON Schema document: {e}"
        self._known.add(schema_id)
        return None

    def decode(self, values: pa.Array) -> Decoded:
        n = len(values)
        values = values.cast(pa.binary())
        present = pc.is_valid(values).to_numpy(zero_copy_only=False)
        magic = pc.binary_slice(values, 0, 1)
        framed = pc.and_(pc.greater_equal(pc.binary_length(values), 5), pc.equal(magic, pa.scalar(b"\0")))
        framed_np = framed.fill_null(False).to_numpy(zero_copy_only=False)
        head = pc.if_else(framed_np, pc.binary_slice(values, 1, 5), pa.scalar(b"\0\0\0\0"))
        fixed = head.cast(pa.binary(4))
        ids = np.frombuffer(fixed.buffers()[1], dtype=">u4", count=n,
                            offset=4 * fixed.offset).astype(np.int64)
        errors: dict[int, str] = {}
        for i in np.flatnonzero(present & ~framed_np).tolist():
            errors[i] = framing_error(values[i].as_py())
        ok = framed_np.copy()
        for sid in np.unique(ids[framed_np]).tolist():
            why = self._check(sid)
            if why is not None:
                rows = np.flatnonzero(framed_np & (ids == sid))
                ok[rows] = False
                errors.update(dict.fromkeys(rows.tolist(), why))
        # every value at least a header long before slicing (Arrow 26 fails slicing a shorter one,
        # and one of exactly 5 without a stop: "Negative buffer resize")
        framed_values = pc.if_else(ok, values, pa.scalar(b"\0" * 5))
        texts = pc.if_else(ok, pc.binary_slice(framed_values, 5, (1 << 31) - 1), pa.nulls(n, pa.binary()))
        inner = self.json.decode(texts)
        errors.update(inner.errors)
        schema_ids = {i: int(ids[i]) for i in errors if framed_np[i]}
        return Decoded(null_failed(inner.columns, set(inner.errors), n), errors, schema_ids)


def make_decoder(cfg: ValueDecodeConfig) -> Decoder:
    """The decoder ``cfg`` asks for; a config it cannot serve raises :class:`DecodeConfigError`
    here, before anything is read (``json_schema`` with a ``subject`` reads the subject's schema
    now: the decoder's ``cfg`` then lists the columns)."""
    if cfg.format == "json":
        return JsonDecoder(cfg)
    if cfg.format == "json_schema":
        return JsonSchemaDecoder(cfg)
    if cfg.format == "protobuf":
        from rlm.tables.protobuf_decode import ProtobufDecoder  # its protobuf runtime: on first use

        return ProtobufDecoder(cfg)
    return AvroDecoder(cfg)
