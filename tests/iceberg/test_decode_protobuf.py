"""Protobuf values through the registry (``iceberg.decode.format: protobuf``) without a broker:
the columns a message gives (each type), an import through a registry reference, values framed
the Confluent way decoded to those columns, each dead-letter reason, the schema-id cache."""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

from rlm.config import ValueDecodeConfig
from rlm.tables.decode import make_decoder
from rlm.tables.decoded import DecodeConfigError, decoded_schema
from rlm.tables.protobuf_decode import ProtobufDecoder, read_index_list
from tests.iceberg.test_decode import AVRO_SCHEMA, confluent_avro, register
from tests.services.schema_registry import SchemaRegistryServer, schema_registry

COMMON_PROTO = """syntax = "proto3";
package rlmtest.common;

message Money {
  string currency = 1;
  int64 units = 2;
}

enum Status {
  UNKNOWN = 0;
  PAID = 1;
  SHIPPED = 2;
}
"""

ORDER_PROTO = """syntax = "proto3";
package rlmtest;

import "google/protobuf/timestamp.proto";
import "google/protobuf/empty.proto";
import "rlmtest/common.proto";

message Order {
  int32 i32 = 1;
  sint32 s32 = 2;
  sfixed32 sf32 = 3;
  int64 i64 = 4;
  sint64 s64 = 5;
  sfixed64 sf64 = 6;
  uint32 u32 = 7;
  fixed32 f32 = 8;
  uint64 u64 = 9;
  fixed64 f64 = 10;
  float fl = 11;
  double db = 12;
  bool ok = 13;
  string name = 14;
  bytes raw = 15;
  rlmtest.common.Status status = 16;
  google.protobuf.Timestamp at = 17;
  rlmtest.common.Money price = 18;
  repeated string tags = 19;
  repeated Line lines = 20;
  map<string, int64> counts = 21;
  map<int32, rlmtest.common.Money> prices = 22;
  optional string note = 23;
  oneof pay {
    string card = 24;
    int64 voucher = 25;
  }
  google.protobuf.Empty nothing = 26;
  repeated rlmtest.common.Status history = 27;

  message Line {
    string sku = 1;
    int32 qty = 2;
  }
}

message Other {
  string x = 1;
}
"""

COLUMN_TYPES = {
    "i32": "int", "s32": "int", "sf32": "int", "i64": "long", "s64": "long", "sf64": "long",
    "u32": "long", "f32": "long", "u64": "long", "f64": "long", "fl": "float", "db": "double",
    "ok": "boolean", "name": "string", "raw": "binary", "status": "string", "at": "timestamptz",
    "price": "struct<{a}: currency: optional string, {b}: units: optional long>",
    "tags": "list<string>", "lines": "list<struct<{a}: sku: optional string, {b}: qty: optional int>>",
    "counts": "map<string, long>",
    "prices": "map<int, struct<{a}: currency: optional string, {b}: units: optional long>>",
    "note": "string", "card": "string", "voucher": "long", "history": "list<string>",
}


@functools.cache
def pb2() -> ModuleType:
    """``rlmtest/order.proto`` compiled to Python by ``grpc_tools.protoc`` (once per process):
    the module of the producers' message classes."""
    out = Path(tempfile.mkdtemp(prefix="rlm-pb2-"))
    src = out / "src"
    (src / "rlmtest").mkdir(parents=True)
    (src / "rlmtest" / "common.proto").write_text(COMMON_PROTO)
    (src / "rlmtest" / "order.proto").write_text(ORDER_PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={out}",
                    "rlmtest/common.proto", "rlmtest/order.proto"], check=True)
    sys.path.insert(0, str(out))
    return importlib.import_module("rlmtest.order_pb2")


def register_proto(url: str, subject: str, text: str, references: list[dict[str, Any]] | None = None) -> int:
    """Register a Protobuf schema (``schemaType: PROTOBUF``, with references) through the Confluent API."""
    body: dict[str, Any] = {"schema": text, "schemaType": "PROTOBUF", "references": references or []}
    quoted = urllib.parse.quote(subject, safe="")
    req = urllib.request.Request(f"{url}/subjects/{quoted}/versions", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(json.loads(resp.read())["id"])


def framed(schema_id: int, message: Any, index: bytes = b"\0") -> bytes:
    """Confluent's Protobuf wire format: magic 0, id, the message-index list, the message."""
    return b"\0" + schema_id.to_bytes(4, "big") + index + message.SerializeToString()


ENGINES = ["upb", *(["ptars"] if ProtobufDecoder.engine_default == "ptars" else [])]
CORRUPT = {"upb": "Wire format was corrupt", "ptars": "unexpected EOF in varint"}  # b"\xff" at the end


@pytest.fixture(params=ENGINES, autouse=True)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test with each engine installed: the same columns and reasons are expected of both."""
    monkeypatch.setattr(ProtobufDecoder, "engine_default", request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with schema_registry() as r:
        yield r


@pytest.fixture(scope="module")
def order_ids(registry: SchemaRegistryServer) -> tuple[int, str]:
    """The order schema, registered with its import as a reference: (id, subject)."""
    register_proto(registry.url, "rlmtest/common.proto", COMMON_PROTO)
    subject = "pb-orders-value"
    sid = register_proto(registry.url, subject, ORDER_PROTO,
                         [{"name": "rlmtest/common.proto", "subject": "rlmtest/common.proto", "version": 1}])
    return sid, subject


def _decoder(registry: SchemaRegistryServer, subject: str, **kw: Any) -> ProtobufDecoder:
    cfg = ValueDecodeConfig.model_validate({"format": "protobuf", "subject": subject,
                                            "schema_registry": {"url": registry.url}, **kw})
    dec = make_decoder(cfg)
    assert isinstance(dec, ProtobufDecoder)
    return dec


def _order(i: int) -> Any:
    m = pb2()
    o = m.Order(i32=-i, s32=-2 * i, sf32=3 * i, i64=-(1 << 40) - i, s64=-(1 << 41), sf64=1 << 42,
                u32=(1 << 32) - 1 - i, f32=i, u64=(1 << 63) - 1 - i, f64=i * 7, fl=1.5 * i, db=i / 3,
                ok=i % 2 == 0, name=f"order-{i}", raw=bytes([i % 256, 0, 255]), status=i % 3,
                tags=[f"t{j}" for j in range(i % 3)], history=[1, 2, 0][: i % 4])
    o.at.FromDatetime(datetime(2026, 11, 20, 10, 0, i % 60, 123456, tzinfo=UTC))
    o.at.nanos += 789  # below a microsecond: truncated
    if i % 4:
        o.price.currency, o.price.units = "EUR", 100 * i
    for j in range(i % 3):
        o.lines.add(sku=f"s{j}", qty=j + 1)
        o.counts[f"k{j}"] = j * i
        o.prices[j].currency = "USD"
        o.prices[j].units = j
    if i % 5 == 0:
        o.note = ""  # set, though empty: not null
    if i % 3 == 1:
        o.card = f"card{i}"
    elif i % 3 == 2:
        o.voucher = i
    return o


def _row(i: int) -> dict[str, Any]:
    o = _order(i)
    return {
        "i32": -i, "s32": -2 * i, "sf32": 3 * i, "i64": -(1 << 40) - i, "s64": -(1 << 41), "sf64": 1 << 42,
        "u32": (1 << 32) - 1 - i, "f32": i, "u64": (1 << 63) - 1 - i, "f64": i * 7, "fl": 1.5 * i,
        "db": i / 3, "ok": i % 2 == 0, "name": f"order-{i}", "raw": bytes([i % 256, 0, 255]),
        "status": ["UNKNOWN", "PAID", "SHIPPED"][i % 3],
        "at": datetime(2026, 11, 20, 10, 0, i % 60, 123456, tzinfo=UTC),
        "price": {"currency": "EUR", "units": 100 * i} if i % 4 else None,
        "tags": [f"t{j}" for j in range(i % 3)],
        "lines": [{"sku": f"s{j}", "qty": j + 1} for j in range(i % 3)],
        "counts": [(f"k{j}", j * i) for j in range(i % 3)],
        "prices": [(j, {"currency": "USD", "units": j}) for j in range(i % 3)],
        "note": "" if i % 5 == 0 else None,
        "card": o.card if i % 3 == 1 else None, "voucher": i if i % 3 == 2 else None,
        "history": ["PAID", "SHIPPED", "UNKNOWN"][: i % 4],
    }


def unordered_maps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with their map columns sorted: a Protobuf map has no order (the parser's hash order)."""
    return [{k: sorted(v) if k in ("counts", "prices") and v is not None else v for k, v in r.items()}
            for r in rows]


def test_read_index_list_as_confluent_writes_it() -> None:
    head = b"\0\0\0\0\1"
    assert read_index_list(head + b"\0rest") == ([0], 6)
    assert read_index_list(head + b"\x02\x02") == ([1], 7)  # count 1 (zigzag 2), index 1
    assert read_index_list(head + b"\x04\x00\x02x") == ([0, 1], 8)
    assert read_index_list(head + b"\x03") == "bad message-index list (count -2)"
    assert read_index_list(head + b"\x80") == "bad message-index list (truncated)"
    assert read_index_list(head + b"\x10\x00") == "bad message-index list (count 8)"


def test_message_fields_to_columns(registry: SchemaRegistryServer, order_ids: tuple[int, str]) -> None:
    """Each Protobuf type's column, the import through a reference, the Empty message left out."""
    dec = _decoder(registry, order_ids[1])
    assert dec.message == "rlmtest.Order"
    schema = decoded_schema(dec.cfg)
    types = {f.name: str(f.field_type) for f in schema.fields if f.name in COLUMN_TYPES}
    assert list(types) == list(COLUMN_TYPES)  # declaration order; `nothing` (Empty) left out
    for name, want in COLUMN_TYPES.items():
        got = types[name]
        if "{a}" in want:  # nested field ids vary: compare without them
            import re
            got = re.sub(r"\d+: ", "", got)
            want = want.replace("{a}: ", "").replace("{b}: ", "")
        assert got == want, name
    assert not any(f.required for f in schema.fields[-len(COLUMN_TYPES):])


def test_protobuf_values_to_typed_columns(registry: SchemaRegistryServer, order_ids: tuple[int, str]) -> None:
    sid, subject = order_ids
    dec = _decoder(registry, subject)
    n = 300
    values = [framed(sid, _order(i)) for i in range(n)]
    values[7] = framed(sid, _order(7), b"\x02\x00")  # [0] written as count 1, index 0
    values.append(None)  # a tombstone
    values.append(framed(sid, pb2().Order()))  # all defaults: an empty payload
    before = registry.by_id_requests
    out = dec.decode(pa.array(values, pa.binary()))
    assert out.errors == {}
    assert registry.by_id_requests == before  # the subject's schema came with the columns
    assert dec.parses == 2  # one parse per (schema id, index path, header length)
    rows = pa.table(out.columns, schema=dec.arrow_schema).to_pylist()
    assert unordered_maps(rows[:n]) == [_row(i) for i in range(n)]
    assert rows[n] == dict.fromkeys(rows[n])
    assert rows[n + 1]["i32"] == 0 and rows[n + 1]["name"] == "" and rows[n + 1]["price"] is None
    assert rows[n + 1]["status"] == "UNKNOWN" and rows[n + 1]["at"] is None  # a message field: presence
    assert out.schema_ids == dict.fromkeys([*range(n), n + 1], sid)


def test_each_dead_letter_reason_and_the_id_cache(registry: SchemaRegistryServer,
                                                  order_ids: tuple[int, str], engine: str) -> None:
    sid, subject = order_ids
    dec = _decoder(registry, subject)
    avro_id = register(registry.url, "pb-avro-value", AVRO_SCHEMA)
    m = pb2()
    good = framed(sid, _order(1))
    big = m.Order(u64=(1 << 64) - 1)
    values: list[bytes | None] = [
        good,
        framed(999_999, _order(1)),                          # 1 unknown id
        confluent_avro(avro_id, AVRO_SCHEMA, {"id": 1, "name": "a", "amount": None,
                                              "at": datetime(2026, 1, 1, tzinfo=UTC), "tags": []}),  # 2
        b"\1" + good[1:],                                    # 3 bad magic
        b"\0\0",                                             # 4 shorter than the header
        b"\0" + sid.to_bytes(4, "big"),                      # 5 no index list
        b"\0" + sid.to_bytes(4, "big") + b"\x03",            # 6 bad index count
        b"\0" + sid.to_bytes(4, "big") + b"\x02\x08" + good[6:],  # 7 index [4]: outside the file
        framed(sid, m.Other(x="y"), b"\x02\x02"),            # 8 index [1]: Other, not the table's
        good + b"\xff",                                      # 9 a payload that does not parse
        framed(sid, big),                                    # 10 uint64 above 2^63 - 1
        framed(sid, m.Order.Line(sku="x"), b"\x04\x00\x04"),  # 11 [0, 2]: Order.Line (after 2 map entries)
        good,
        b"",                                                 # 13 empty
    ]
    before = registry.by_id_requests
    out = dec.decode(pa.array(values, pa.binary()))
    assert registry.by_id_requests - before == 2  # the unknown id and the Avro id, once each
    assert out.errors == {
        1: "unknown schema id 999999 (the registry has no such id)",
        2: f"schema id {avro_id} is AVRO, not PROTOBUF",
        3: "not Confluent wire format (magic byte 1)",
        4: "not Confluent wire format (2 bytes, shorter than the 5-byte header)",
        5: "not Confluent Protobuf wire format (no message-index list)",
        6: "bad message-index list (count -2)",
        7: f"message index [4] is outside schema id {sid} (2 top-level message(s))",
        8: f"message rlmtest.Other (schema id {sid}) is not the table's rlmtest.Order",
        9: out.errors[9], 10: out.errors[10],
        11: f"message rlmtest.Order.Line (schema id {sid}) is not the table's rlmtest.Order",
        13: "not Confluent wire format (empty value)",
    }
    assert out.errors[9] == f"corrupt Protobuf payload for schema id {sid} (rlmtest.Order): {CORRUPT[engine]}"
    assert out.errors[10] == ("decoded message does not fit the columns: field u64: an unsigned 64-bit value "
                              "above 2^63 - 1 does not fit a long column")
    assert out.schema_ids == {0: sid, 1: 999_999, 2: avro_id, 5: sid, 6: sid, 7: sid, 8: sid, 9: sid,
                              10: sid, 11: sid, 12: sid}
    rows = pa.table(out.columns, schema=dec.arrow_schema).to_pylist()
    assert unordered_maps([rows[0], rows[12]]) == [_row(1)] * 2
    assert all(rows[i] == dict.fromkeys(rows[i]) for i in out.errors)
    dec.decode(pa.array(values, pa.binary()))
    assert registry.by_id_requests - before == 2  # cached, the unknown id too


def test_a_protobuf_id_given_to_the_avro_decoder_keeps_its_dead_letter(
        registry: SchemaRegistryServer, order_ids: tuple[int, str]) -> None:
    sid = order_ids[0]
    cfg = ValueDecodeConfig.model_validate({"format": "avro", "fields": [{"name": "id", "type": "long"}],
                                            "schema_registry": {"url": registry.url}})
    out = make_decoder(cfg).decode(pa.array([framed(sid, _order(1))], pa.binary()))
    assert out.errors == {0: f"schema id {sid} is PROTOBUF, not AVRO"}


def test_a_serialized_descriptor_schema_and_a_chosen_message(registry: SchemaRegistryServer,
                                                             order_ids: tuple[int, str]) -> None:
    """A schema registered as a base64 FileDescriptorProto (confluent-kafka's Python serializer),
    its import as a reference to another; ``message`` picks the file's second message."""
    import base64

    from google.protobuf import descriptor_pb2

    m = pb2()
    common = descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.dependencies[2].serialized_pb)
    order = descriptor_pb2.FileDescriptorProto.FromString(m.DESCRIPTOR.serialized_pb)
    assert common.name == "rlmtest/common.proto"
    register_proto(registry.url, "b64-common", base64.b64encode(common.SerializeToString()).decode())
    subject = "pb-b64-value"
    sid = register_proto(registry.url, subject, base64.b64encode(order.SerializeToString()).decode(),
                         [{"name": "rlmtest/common.proto", "subject": "b64-common", "version": 1}])
    dec = _decoder(registry, subject, message="rlmtest.Other")
    assert [f.name for f in dec.cfg.fields] == ["x"]
    out = dec.decode(pa.array([framed(sid, m.Other(x="y"), b"\x02\x02"), framed(sid, _order(1))]))
    assert pa.table(out.columns, schema=dec.arrow_schema).to_pylist()[0] == {"x": "y"}
    assert out.errors == {1: f"message rlmtest.Order (schema id {sid}) is not the table's rlmtest.Other"}
    order_dec = _decoder(registry, subject)
    got = order_dec.decode(pa.array([framed(sid, _order(2)), framed(order_ids[0], _order(3))]))
    assert got.errors == {}  # the text schema's id and the serialized one's: same message
    rows = pa.table(got.columns, schema=order_dec.arrow_schema).to_pylist()
    assert unordered_maps(rows) == [_row(2), _row(3)]


def test_protobuf_config_errors_at_start(registry: SchemaRegistryServer, order_ids: tuple[int, str]) -> None:
    register(registry.url, "pb-avro-subject", AVRO_SCHEMA)
    bad = register_proto(registry.url, "pb-bad-value", 'syntax = "proto3"; message A { strin x = 1; }')
    assert bad > 0
    for subject, kw, match in (
            ("pb-nope-value", {}, "no such subject"), ("pb-avro-subject", {}, "is AVRO, not PROTOBUF"),
            ("pb-bad-value", {}, "does not compile: protoc: .*strin"),
            (order_ids[1], {"message": "rlmtest.Nope"}, "has no message 'rlmtest.Nope'")):
        with pytest.raises(DecodeConfigError, match=match):
            _decoder(registry, subject, **kw)
    with pytest.raises(ValueError, match="format protobuf takes its columns from `subject`"):
        ValueDecodeConfig.model_validate({"format": "protobuf", "schema_registry": {"url": registry.url},
                                          "fields": [{"name": "a", "type": "long"}]})
    with pytest.raises(ValueError, match="type map comes only from a Protobuf schema"):
        ValueDecodeConfig.model_validate({"format": "json", "fields": [
            {"name": "a", "type": "map", "key": {"name": "k", "type": "string"},
             "value": {"name": "v", "type": "long"}}]})


def test_through_the_tables_with_an_id_above_int32(registry: SchemaRegistryServer, order_ids: tuple[int, str],
                                                   tmp_path: Path) -> None:
    """The decoder behind the writer's :class:`Decoding` (SQLite catalog, no broker): the decoded
    row (every column type) is appended to the table and read back equal; the dead letters are
    in their table, one with a schema id above 2^31 - 1 (its column null, its reason naming it)."""
    from pyiceberg.catalog import load_catalog

    from rlm.config import IcebergConfig
    from rlm.tables.deadletter import Decoding
    from rlm.tables.ledger import SegmentWork
    from rlm.tables.table import ARROW_SCHEMA

    sid, subject = order_ids
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": tmp_path.as_uri()}
    cfg = IcebergConfig.model_validate({"catalog": props, "decode": {
        "format": "protobuf", "subject": subject, "schema_registry": {"url": registry.url}}})
    catalog = load_catalog("rlm", **props)
    decoding = Decoding(catalog, cfg, "orders")
    table = catalog.create_table(f"{cfg.namespace}.orders", decoding.schema)
    values = [framed(sid, _order(2)), b"\0\xff\xff\xff\xff\0\x08\x01", framed(999_998, _order(3))]
    n = len(values)
    data = pa.table({
        "key": pa.nulls(n, pa.binary()), "value": pa.array(values, pa.binary()), "topic": ["orders"] * n,
        "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([datetime(2026, 11, 20, tzinfo=UTC)] * n, pa.timestamp("us", "UTC")),
        "timestampType": pa.array([0] * n, pa.int32()),
        "headers": pa.nulls(n, ARROW_SCHEMA.field("headers").type),
        "segment_id": ["seg-1"] * n})
    data = pa.Table.from_arrays([data.column(f.name).cast(f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
    rows = decoding.split([SegmentWork(0, "seg-1", 0, n)], data, "topic-id", table)
    table.append(rows)
    back = catalog.load_table(f"{cfg.namespace}.orders").scan().to_arrow().to_pylist()
    assert len(back) == 1 and back[0]["offset"] == 0
    assert unordered_maps([{c: back[0][c] for c in COLUMN_TYPES}]) == [_row(2)]
    dead = catalog.load_table(decoding.identifier).scan().to_arrow().sort_by("offset").to_pylist()
    assert [(d["offset"], d["reason"], d["schema_id"]) for d in dead] == [
        (1, "unknown schema id 4294967295 (the registry has no such id)", None),
        (2, "unknown schema id 999998 (the registry has no such id)", 999_998)]


def test_proto2_presence_defaults_and_a_missing_required_field(registry: SchemaRegistryServer) -> None:
    """proto2: an unset optional field is null (not its declared default), a packed repeated
    field decodes, a record without a ``required`` field is a dead letter."""
    from google.protobuf import message_factory

    from rlm.config import SchemaRegistryConfig
    from rlm.tables.protobuf_decode import load_schema
    from rlm.tables.registry import SchemaRegistry

    text = """syntax = "proto2";
package p2;
message A {
  required int64 id = 1;
  optional string s = 2 [default = "dflt"];
  optional int32 n = 3;
  repeated int32 r = 4 [packed = true];
}
"""
    sid = register_proto(registry.url, "p2-value", text)
    dec = _decoder(registry, "p2-value")
    assert [(f.name, f.required) for f in dec.cfg.fields] == [("id", True), ("s", False), ("n", False),
                                                              ("r", False)]
    client = SchemaRegistry(SchemaRegistryConfig(url=registry.url))
    ws = client.get(sid)
    assert ws is not None
    a = message_factory.GetMessageClass(load_schema(client, ws).pool.FindMessageTypeByName("p2.A"))
    head = b"\0" + sid.to_bytes(4, "big") + b"\0"
    out = dec.decode(pa.array([head + a(id=1, s="x", n=2, r=[1, 2]).SerializeToString(),
                               head + a(id=2).SerializeToString(),
                               head + a(s="no id").SerializePartialToString()]))
    assert pa.table(out.columns, schema=dec.arrow_schema).to_pylist()[:2] == [
        {"id": 1, "s": "x", "n": 2, "r": [1, 2]}, {"id": 2, "s": None, "n": None, "r": []}]
    assert out.errors == {2: "required field 'id' is missing or null"}


def test_well_known_messages_are_structs_with_both_engines(registry: SchemaRegistryServer) -> None:
    """Wrappers, Duration, Struct (recursive: cut where it recurs) and Any are structs of their
    fields — with ptars too, which builds its own types for some of them (those columns are then
    taken the upb way)."""
    from google.protobuf import message_factory

    from rlm.config import SchemaRegistryConfig
    from rlm.tables.protobuf_decode import load_schema
    from rlm.tables.registry import SchemaRegistry

    text = """syntax = "proto3";
package wk;
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
message W {
  google.protobuf.Int64Value a = 1;
  google.protobuf.StringValue b = 2;
  google.protobuf.Duration d = 3;
  google.protobuf.Struct s = 4;
  google.protobuf.Any x = 5;
  int64 n = 6;
}
"""
    sid = register_proto(registry.url, "wk-value", text)
    dec = _decoder(registry, "wk-value")
    types = {f.name: str(f.field_type) for f in decoded_schema(dec.cfg).fields if f.name in "abdsxn"}
    import re
    types = {k: re.sub(r"\d+: ", "", v) for k, v in types.items()}
    assert types == {
        "a": "struct<value: optional long>", "b": "struct<value: optional string>",
        "d": "struct<seconds: optional long, nanos: optional int>",
        "s": "struct<fields: optional map<string, struct<null_value: optional string, number_value: optional "
             "double, string_value: optional string, bool_value: optional boolean>>>",
        "x": "struct<type_url: optional string, value: optional binary>", "n": "long"}
    client = SchemaRegistry(SchemaRegistryConfig(url=registry.url))
    ws = client.get(sid)
    assert ws is not None
    w = message_factory.GetMessageClass(load_schema(client, ws).pool.FindMessageTypeByName("wk.W"))
    m = w(n=7)
    m.a.value, m.d.seconds, m.d.nanos = 5, 3, 9
    m.s.fields["k"].number_value = 1.5
    m.s.fields["t"].struct_value.fields["deep"].bool_value = True  # cut: not in the columns
    m.x.type_url, m.x.value = "type.googleapis.com/x", b"\1"
    head = b"\0" + sid.to_bytes(4, "big") + b"\0"
    out = dec.decode(pa.array([head + m.SerializeToString(), head]))
    assert out.errors == {}
    rows = pa.table(out.columns, schema=dec.arrow_schema).to_pylist()
    s = sorted(rows[0]["s"]["fields"])
    none = {"null_value": None, "number_value": None, "string_value": None, "bool_value": None}  # a oneof
    assert s == [("k", {**none, "number_value": 1.5}), ("t", none)]  # t's struct_value: cut
    assert {k: v for k, v in rows[0].items() if k != "s"} == {
        "a": {"value": 5}, "b": None, "d": {"seconds": 3, "nanos": 9},
        "x": {"type_url": "type.googleapis.com/x", "value": b"\1"}, "n": 7}
    assert rows[1] == {"a": None, "b": None, "d": None, "s": None, "x": None, "n": 0}
