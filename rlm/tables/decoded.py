"""The decoded columns every value decoder shares (JSON, Avro, JSON Schema in
:mod:`rlm.tables.decode`, Protobuf in :mod:`rlm.tables.protobuf_decode`): the decoder
protocol and its answer, the table's schema with the decoded columns, the required-field and framing
checks, the columns a registry schema gives beside the Kafka ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from rlm.config import DecodedField, ValueDecodeConfig
from rlm.errors import ConfigError
from rlm.tables.table import SCHEMA

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "string": StringType(), "binary": BinaryType(), "date": DateType(),
    "timestamp": TimestampType(), "timestamptz": TimestamptzType(),
}


log = structlog.get_logger(__name__)


class DecodeConfigError(ConfigError):
    """``iceberg.decode`` cannot be used: a field collides with a Kafka column, a type is unknown."""


@dataclass(slots=True)
class Decoded:
    """A batch decoded: the columns (null where a row failed) and the failed rows' reasons."""

    columns: list[pa.Array]
    errors: dict[int, str] = field(default_factory=dict)  # row index -> reason
    schema_ids: dict[int, int] = field(default_factory=dict)  # row index -> schema id (Avro)


class Decoder(Protocol):
    cfg: ValueDecodeConfig  # with the columns (``json_schema`` may take them from the registry)
    arrow_schema: pa.Schema

    def decode(self, values: pa.Array) -> Decoded: ...


# ---- the decoded columns' types ----------------------------------------------------------------
class _Ids:
    def __init__(self, start: int) -> None:
        self.next = start

    def __call__(self) -> int:
        self.next += 1
        return self.next


def _iceberg_type(f: DecodedField, ids: _Ids) -> IcebergType:
    if f.type == "struct":
        return StructType(*[NestedField(ids(), c.name, _iceberg_type(c, ids), required=False)
                            for c in f.fields or []])
    if f.type == "list":
        assert f.element is not None
        return ListType(ids(), _iceberg_type(f.element, ids), element_required=False)
    if f.type == "map":
        assert f.key is not None and f.value is not None
        key_id, value_id = ids(), ids()
        return MapType(key_id, _iceberg_type(f.key, ids), value_id, _iceberg_type(f.value, ids),
                       value_required=False)
    try:
        return _PRIMITIVES[f.type]
    except KeyError:  # the config model admits only known names; this guards programmatic use
        raise DecodeConfigError(f"iceberg.decode: field {f.name!r} has unknown type {f.type!r}") from None


def decoded_schema(cfg: ValueDecodeConfig) -> Schema:
    """The table's schema: the Kafka columns, then the decoded ones (always optional)."""
    taken = {f.name for f in SCHEMA.fields}
    clash = [f.name for f in cfg.fields if f.name in taken]
    if clash:
        raise DecodeConfigError(
            f"iceberg.decode: field(s) {clash} collide with the Kafka columns {sorted(taken)}")
    ids = _Ids(max(SCHEMA.field_ids) + 100)
    extra = [NestedField(ids(), f.name, _iceberg_type(f, ids), required=False) for f in cfg.fields]
    return Schema(*SCHEMA.fields, *extra)


def arrow_fields(cfg: ValueDecodeConfig) -> pa.Schema:
    full = decoded_schema(cfg).as_arrow()
    return pa.schema([full.field(f.name) for f in cfg.fields])


def required_errors(cfg: ValueDecodeConfig, columns: list[pa.Array], present: pa.Array,
                     errors: dict[int, str]) -> None:
    """Rows with a non-null value whose required field decoded to null."""
    for f, col in zip(cfg.fields, columns, strict=True):
        if not f.required:
            continue
        missing = pc.and_(present, pc.is_null(col))
        for i in pc.indices_nonzero(missing).to_pylist():
            errors.setdefault(i, f"required field {f.name!r} is missing or null")


def null_failed(columns: list[pa.Array], failed: set[int], n: int) -> list[pa.Array]:
    if not failed:
        return columns
    mask = np.ones(n, dtype=bool)
    mask[np.fromiter(failed, dtype=np.int64, count=len(failed))] = False
    keep = pa.array(mask)
    return [pc.if_else(keep, c, pa.nulls(n, c.type)) for c in columns]


def framing_error(v: bytes) -> str:
    if not v:
        return "not Confluent wire format (empty value)"
    if v[0] != 0:
        return f"not Confluent wire format (magic byte {v[0]})"
    return f"not Confluent wire format ({len(v)} bytes, shorter than the 5-byte header)"


def columns_beside_kafka(fields: list[DecodedField], skipped: list[str], *, where: str, what: str,
                         event: str, **log_fields: Any) -> list[DecodedField]:
    """The fields a registry schema gives that can be columns. One named like a Kafka column
    (``key``, ``offset``...) stays in ``value``: logged once with those the schema could not map,
    so an operator sees what is not a column; none left is a configuration error, not an empty
    decode."""
    taken = {f.name for f in SCHEMA.fields}
    kept = [f for f in fields if f.name not in taken]
    left_out = [*skipped, *(f.name for f in fields if f.name in taken)]
    if left_out:
        log.warning(event, left_out=left_out, **log_fields)
    if not kept:
        raise DecodeConfigError(f"{where}: no {what} gives a column (left out: {left_out})")
    return kept
