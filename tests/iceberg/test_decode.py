"""Value decoding (``iceberg.decode``) without a broker: the JSON and Avro decoders' columns and
reasons, the registry client's cache and errors, and configuration errors at start."""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
import yaml

from rlm.config import ValueDecodeConfig, load_config
from rlm.errors import ConfigError
from rlm.tables.decode import make_decoder
from rlm.tables.decoded import DecodeConfigError, decoded_schema
from rlm.tables.registry import SchemaRegistryError
from tests.services.schema_registry import SchemaRegistryServer, schema_registry

JSON_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True},
    {"name": "at", "type": "timestamptz"},
    {"name": "day", "type": "date"},
    {"name": "who", "type": "struct", "fields": [{"name": "name", "type": "string"},
                                                 {"name": "age", "type": "int"}]},
    {"name": "items", "type": "list", "element": {"name": "item", "type": "struct",
                                                  "fields": [{"name": "price", "type": "double"}]}},
    {"name": "ok", "type": "boolean"},
]

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "t",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
               {"name": "amount", "type": ["null", "double"], "default": None},
               {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
               {"name": "tags", "type": {"type": "array", "items": "string"}}],
}
AVRO_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "at", "type": "timestamptz"},
    {"name": "tags", "type": "list", "element": {"name": "tag", "type": "string"}},
]


def register(url: str, subject: str, schema: dict[str, Any]) -> int:
    """Register through the registry's Confluent API, as a producer's serializer does."""
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", method="POST",
                                 data=json.dumps({"schema": json.dumps(schema)}).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(json.loads(resp.read())["id"])


def confluent_avro(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """Confluent's wire format: magic byte 0, schema id (4 bytes, big-endian), Avro binary."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return b"\0" + schema_id.to_bytes(4, "big") + buf.getvalue()


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with schema_registry() as r:
        yield r


def _table(decoder: Any, decoded: Any) -> list[dict[str, Any]]:
    return list(pa.table(decoded.columns, schema=decoder.arrow_schema).to_pylist())


def test_json_batch_to_typed_columns_and_every_bad_value_with_its_reason() -> None:
    dec = make_decoder(ValueDecodeConfig.model_validate({"format": "json", "fields": JSON_FIELDS}))
    good = {"id": 1, "at": "2026-11-20T10:00:00+02:00", "day": "2026-11-20", "extra": {"x": [1]},
            "who": {"name": "ann", "age": 41, "more": 1}, "items": [{"price": 1.5, "sku": "a"}, {"price": 2}],
            "ok": True}
    values: list[bytes | None] = [
        json.dumps(good).encode(), b'{\n  "id": 2\n}', None, b"{}", b'{"id": "x"}', b'{"id": 1.5}', b"[1]",
        b"3", b"  ", b'{"id": 1}{"id": 2}', b'{"id": 3, "at": "nope"}', b'{"id": 1', b'{"id": 4}, "w": {}',
        b"null", b"", b'{"id": 5, "who": {"age": 99999999999}}', b'{"id": 6}']
    out = dec.decode(pa.array(values, pa.binary()))
    rows = _table(dec, out)
    assert rows[0] == {"id": 1, "at": datetime(2026, 11, 20, 8, tzinfo=UTC), "day": date(2026, 11, 20),
                       "who": {"name": "ann", "age": 41}, "items": [{"price": 1.5}, {"price": 2.0}],
                       "ok": True}
    assert rows[1]["id"] == 2 and rows[16]["id"] == 6
    assert rows[2] == dict.fromkeys(rows[2])  # a tombstone: null columns, not a dead letter
    assert sorted(out.errors) == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    assert out.errors[3] == "required field 'id' is missing or null"
    assert "changed from number to string" in out.errors[4]
    assert "couldn't parse:nope" in out.errors[10]
    assert out.errors[12] == "JSON does not decode: not one JSON object"
    assert out.errors[13] == "JSON does not decode: null, not an object"
    assert all(rows[i] == dict.fromkeys(rows[i]) for i in out.errors)  # failed rows: null columns


def test_json_good_batch_is_one_parse() -> None:
    dec = make_decoder(ValueDecodeConfig.model_validate({"format": "json", "fields": JSON_FIELDS}))
    values = [json.dumps({"id": i, "ok": i % 2 == 0}).encode() for i in range(5000)]
    out = dec.decode(pa.array(values, pa.binary()))
    assert not out.errors and dec.parses == 1  # type: ignore[attr-defined]
    assert pa.table(out.columns, schema=dec.arrow_schema).column("id").to_pylist() == list(range(5000))


def test_avro_through_the_registry(registry: SchemaRegistryServer) -> None:
    sid = register(registry.url, "orders-value", AVRO_SCHEMA)
    cfg = ValueDecodeConfig.model_validate({"format": "avro", "fields": AVRO_FIELDS,
                                            "schema_registry": {"url": registry.url}})
    dec = make_decoder(cfg)
    at = datetime(2026, 11, 20, 10, 0, 0, 123000, tzinfo=UTC)
    recs = [{"id": i, "name": f"n{i}", "amount": None if i % 3 == 0 else i / 4, "at": at,
             "tags": ["a"] * (i % 3)} for i in range(50)]
    good = [confluent_avro(sid, AVRO_SCHEMA, r) for r in recs]
    before = registry.by_id_requests
    values = [*good, b"\0" + (999_999).to_bytes(4, "big") + good[0][5:], good[1][:9], good[2] + b"\1",
              b"\1" + good[3][1:], None]
    out = dec.decode(pa.array(values, pa.binary()))
    assert registry.by_id_requests - before == 2  # one fetch of the schema, one 404: then cached
    assert _table(dec, out)[:50] == recs
    assert out.errors == {
        50: "unknown schema id 999999 (the registry has no such id)",
        51: out.errors[51], 52: f"corrupt Avro payload for schema id {sid}: 1 bytes left over",
        53: "not Confluent wire format (magic byte 1)"}
    assert out.errors[51].startswith(f"corrupt Avro payload for schema id {sid}: ")
    assert out.schema_ids[50] == 999_999 and 54 not in out.errors
    dec.decode(pa.array(good, pa.binary()))
    assert registry.by_id_requests - before == 2


def test_a_registry_that_does_not_answer_stops_the_pass() -> None:
    with schema_registry() as r:
        url = r.url
    cfg = ValueDecodeConfig.model_validate({"format": "avro", "fields": AVRO_FIELDS,
                                            "schema_registry": {"url": url, "timeout_s": 2}})
    with pytest.raises(SchemaRegistryError, match="schemas/ids/7"):
        make_decoder(cfg).decode(pa.array([b"\0\0\0\0\x07\x02"], pa.binary()))


def _config(tmp_path: Path, decode: dict[str, Any]) -> Path:
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump({"bootstrap_servers": "localhost:9092", "work_dir": str(tmp_path),
                                    "storage": {"plugin": "local", "config": {"root": str(tmp_path)}},
                                    "iceberg": {"decode": decode}}))
    return path


@pytest.mark.parametrize(("decode", "match"), [
    ({"format": "json", "fields": [{"name": "a", "type": "decimal"}]},
     r"iceberg.decode.fields\[0\].type = 'decimal'"),
    ({"format": "json", "fields": [{"name": "a", "type": "struct"}]}, "`fields` goes with type struct"),
    ({"format": "avro", "fields": [{"name": "a", "type": "long"}]}, "format avro needs schema_registry"),
    ({"format": "xml", "fields": [{"name": "a", "type": "long"}]}, r"iceberg.decode.format = 'xml'"),
])
def test_a_bad_decoding_config_is_a_config_error_at_start(tmp_path: Path, decode: dict[str, Any],
                                                          match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(_config(tmp_path, decode))


def test_a_field_named_like_a_kafka_column_is_refused() -> None:
    cfg = ValueDecodeConfig.model_validate({"format": "json", "fields": [{"name": "offset", "type": "long"}]})
    with pytest.raises(DecodeConfigError, match="collide with the Kafka columns"):
        decoded_schema(cfg)


# ---- JSON Schema through the registry ----------------------------------------------------------
ORDER_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "required": ["id", "name"],
    "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"},
        "amount": {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "number"}]},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": ["string", "null"], "format": "date"},
        "ok": {"type": "boolean"}, "who": {"$ref": "#/definitions/Who"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "string"}},  # a map: left out
        "either": {"type": ["string", "integer"]},  # no single type: left out
        "offset": {"type": "integer"},  # a Kafka column's name: left out (stays in `value`)
    },
    "definitions": {"Who": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}},
}


def register_json_schema(url: str, subject: str, schema: dict[str, Any]) -> int:
    """Register a JSON Schema (``schemaType: JSON``) as Confluent's JSON Schema serializer does."""
    body = {"schema": json.dumps(schema), "schemaType": "JSON"}
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(json.loads(resp.read())["id"])


def confluent_json(schema_id: int, doc: Any) -> bytes:
    """Confluent's JSON Schema wire format: magic byte 0, schema id (4 bytes, big-endian), JSON text."""
    return b"\0" + schema_id.to_bytes(4, "big") + json.dumps(doc).encode()


def test_json_schema_properties_to_columns() -> None:
    from rlm.tables.json_schema import JsonSchemaError, columns_from_json_schema

    cols = columns_from_json_schema(ORDER_JSON_SCHEMA)
    cfg = ValueDecodeConfig.model_validate({"format": "json", "fields": [
        f.model_dump() for f in cols.fields if f.name != "offset"]})
    types = {f.name: str(f.field_type) for f in decoded_schema(cfg).fields[-8:]}
    assert types == {"id": "long", "name": "string", "amount": "double", "at": "timestamptz", "day": "date",
                     "ok": "boolean", "who": "struct<120: name: optional string, 121: age: optional long>",
                     "tags": "list<string>"}
    assert [f.name for f in cols.fields if f.required] == ["id", "name"]
    assert next(f.required for f in cols.fields if f.name == "who") is False
    assert cols.fields[6].fields is not None and cols.fields[6].fields[0].required  # who.name
    assert cols.skipped == ["attrs", "either"]
    with pytest.raises(JsonSchemaError, match="not an object schema"):
        columns_from_json_schema({"type": "array", "items": {"type": "string"}})


def test_json_schema_values_through_the_registry(registry: SchemaRegistryServer) -> None:
    subject = "js-orders-value"
    sid = register_json_schema(registry.url, subject, ORDER_JSON_SCHEMA)
    avro_id = register(registry.url, "other-value", AVRO_SCHEMA)
    cfg = ValueDecodeConfig.model_validate({"format": "json_schema", "subject": subject,
                                            "schema_registry": {"url": registry.url}})
    dec = make_decoder(cfg)
    assert [f.name for f in dec.cfg.fields] == ["id", "name", "amount", "at", "day", "ok", "who", "tags"]
    docs = [{"id": i, "name": f"n{i}", "amount": None if i % 2 else i / 4, "at": "2026-11-20T10:00:00Z",
             "day": "2026-11-20", "ok": i % 3 == 0, "who": {"name": "w", "age": i}, "tags": ["a"] * (i % 3),
             "attrs": {"x": "y"}, "offset": 5} for i in range(20)]
    values: list[bytes | None] = [confluent_json(sid, d) for d in docs]
    avro_rec = {"id": 1, "name": "a", "amount": None, "tags": [], "at": datetime(2026, 1, 1, tzinfo=UTC)}
    values += [confluent_json(999_999, docs[0]), b"\0" + sid.to_bytes(4, "big") + b"{not json",
               confluent_json(sid, {"id": "x", "name": "a"}), confluent_json(sid, {"id": 1}), b'{"id": 1}',
               b"\0\0", confluent_avro(avro_id, AVRO_SCHEMA, avro_rec),
               None]
    before = registry.by_id_requests
    out = dec.decode(pa.array(values, pa.binary()))
    # the unknown id and the Avro id, once each (the subject's schema came with the columns)
    assert registry.by_id_requests - before == 2
    rows = _table(dec, out)
    assert rows[:20] == [{**{k: v for k, v in d.items() if k not in ("attrs", "offset")},
                          "at": datetime(2026, 11, 20, 10, tzinfo=UTC), "day": date(2026, 11, 20)}
                         for d in docs]
    assert rows[27] == dict.fromkeys(rows[27]) and 27 not in out.errors  # a tombstone
    assert out.errors[20] == "unknown schema id 999999 (the registry has no such id)"
    assert out.errors[21].startswith("JSON does not decode: ")
    assert "changed from number to string" in out.errors[22] or "string" in out.errors[22]
    assert out.errors[23] == "required field 'name' is missing or null"
    assert out.errors[24] == "not Confluent wire format (magic byte 123)"
    assert out.errors[25] == "not Confluent wire format (2 bytes, shorter than the 5-byte header)"
    assert out.errors[26] == f"schema id {avro_id} is AVRO, not JSON"
    assert sorted(out.errors) == list(range(20, 27))
    assert out.schema_ids == {20: 999_999, 21: sid, 22: sid, 23: sid, 26: avro_id}
    assert all(rows[i] == dict.fromkeys(rows[i]) for i in out.errors)
    dec.decode(pa.array(values[:20], pa.binary()))
    assert registry.by_id_requests - before == 2


def test_json_schema_subject_errors_at_start(registry: SchemaRegistryServer) -> None:
    avro_subject = "js-avro-value"
    register(registry.url, avro_subject, AVRO_SCHEMA)
    for subject, match in (("js-nope-value", "no such subject"), (avro_subject, "is AVRO, not JSON")):
        cfg = ValueDecodeConfig.model_validate({"format": "json_schema", "subject": subject,
                                                "schema_registry": {"url": registry.url}})
        with pytest.raises(DecodeConfigError, match=match):
            make_decoder(cfg)
    with pytest.raises(ValueError, match="give `subject`"):
        ValueDecodeConfig.model_validate({"format": "json_schema", "schema_registry": {"url": registry.url}})
