"""Spark's Kafka source schema and the conversion of decoded batches to exactly its Arrow form.

Spark (4.2+) checks the first yielded batch against ``to_arrow_schema(schema, timezone="UTC")``
field by field, so the decoder's batches (:data:`rlm.log.KAFKA_SCHEMA`: millisecond timestamps,
empty header lists) are adapted column by column, without a per-row step: timestamps become
microseconds in UTC, and a record without headers gets a null ``headers`` (Spark's Kafka source
returns null there, not an empty array). A narrower user schema selects its columns by name.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlm.errors import ConfigError

KAFKA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
             "timestampType INT")
HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def spark_schema(include_headers: bool) -> Any:
    """The ``StructType`` of Spark's Kafka source (``headers`` only when asked)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header, True)))
    return StructType(fields)


def check_user_schema(schema: Any) -> None:
    """A user schema may drop or reorder Kafka columns, never add or re-type one."""
    full = {f.name: f.dataType for f in spark_schema(True).fields}
    for f in schema.fields:
        if f.name not in full:
            raise ConfigError(f"kafka-tiered schema: column {f.name!r} is not a Kafka source column "
                              f"(columns: {', '.join(full)})")
        if f.dataType != full[f.name]:
            raise ConfigError(f"kafka-tiered schema: column {f.name!r} must be "
                              f"{full[f.name].simpleString()}, not {f.dataType.simpleString()}")


def arrow_schema(schema: Any) -> pa.Schema:
    """What Spark expects ``read()`` to yield for ``schema`` (its own conversion, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_spark_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Adapt a decoded batch to ``target`` (a subset of the Kafka columns, Spark's Arrow types)."""
    cols = []
    for f in target:
        col = batch.column(f.name)
        if f.name == "timestamp":
            col = col.cast(f.type)
        elif f.name == "headers":
            col = _null_empty_lists(col, f.type)
        elif col.type != f.type:
            col = col.cast(f.type)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=target)


def _null_empty_lists(col: pa.Array, typ: pa.DataType) -> pa.Array:
    lengths = pc.list_value_length(col)
    empty = pc.equal(lengths, 0)
    values = col.values
    if values.type != typ.value_type:
        values = values.cast(typ.value_type)
    return pa.ListArray.from_arrays(col.offsets, values, type=typ, mask=empty)
