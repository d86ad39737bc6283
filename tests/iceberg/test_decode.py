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

from fetcher.iceberg.decode import DecodeConfigError, decoded_schema, make_decoder
from fetcher.iceberg.registry import SchemaRegistryError
from rlm.config import ValueDecodeConfig, load_config
from rlm.errors import ConfigError
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
