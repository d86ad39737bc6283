"""``rlm iceberg`` with value decoding, end to end: a real broker, the local storage plugin (the
object-store paths are test_iceberg.py's), the topic metadata store, the SQL catalog, and a
Confluent-API schema registry (the in-process stand-in of :mod:`tests.services.schema_registry`:
no real registry starts on this machine).

One tiered topic (built once for the module) of Confluent-framed Avro values under two
registered schema versions, with bad values spread over its segments: an unknown schema id, a
truncated payload, a value without the wire format, plus a tombstone. The truth is what a
read_committed consumer read from the broker, decoded here with fastavro. Tiered in the same
pass: two plain JSON topics (one table of their own each, or one shared table), and a topic of
Confluent-framed JSON under two JSON Schema versions.
"""

from __future__ import annotations

import io
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from confluent_kafka import Producer
from pyiceberg.catalog import load_catalog

from rlm.config import IcebergConfig, load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, topic_rlmm
from tests.iceberg.test_decode import confluent_avro, confluent_json, register, register_json_schema
from tests.iceberg.test_iceberg import consumed, run_at_once, run_iceberg
from tests.services.kafka import KafkaCluster
from tests.services.schema_registry import SchemaRegistryServer, schema_registry

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

V1: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "rlm.test",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
               {"name": "amount", "type": ["null", "double"], "default": None},
               {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
               {"name": "tags", "type": {"type": "array", "items": "string"}},
               {"name": "pad", "type": "bytes"}],
}
V2: dict[str, Any] = {**V1, "fields": [*V1["fields"],
                                       {"name": "note", "type": ["null", "string"], "default": None}]}
FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "at", "type": "timestamptz"},
    {"name": "tags", "type": "list", "element": {"name": "tag", "type": "string"}},
    {"name": "note", "type": "string"},
]
COLUMNS = [f["name"] for f in FIELDS]
N = 5000
BAD = {700: "unknown", 2600: "corrupt", 3900: "plain"}  # record index -> kind (two segments tiered)
TOMBSTONE = 3300


JSON_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True}, {"name": "at", "type": "timestamptz"},
    {"name": "who", "type": "struct",
     "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]},
    {"name": "tags", "type": "list", "element": {"name": "tag", "type": "string"}},
]
JSON_BAD = {100: b'{"id": "one hundred"}', 400: b"not json", 700: b'{"id": 1}{"id": 2}',
            1000: b'{"at": "2026"}'}  # in the first segment (1,600 to 2,100 values, by batching)


def _produce_json(bs: str, topic: str, first_id: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})  # uncompressed: 1 MiB segments roll
    for i in range(3000):
        doc = {"id": first_id + i, "at": f"2026-11-20T{i % 24:02d}:00:00+01:00",
               "who": {"name": f"c{i}", "age": i % 97}, "tags": ["x"] * (i % 4), "pad": "p" * 400}
        p.produce(topic, key=f"j{i}".encode(), value=JSON_BAD.get(i, json.dumps(doc).encode()), partition=0)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


JS_V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "required": ["id", "name"],
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                   "amount": {"type": ["number", "null"]}, "at": {"type": "string", "format": "date-time"},
                   "paid": {"type": "boolean"}, "who": {"$ref": "#/definitions/Who"},
                   "tags": {"type": "array", "items": {"type": "string"}}, "pad": {"type": "string"}},
    "definitions": {"Who": {"type": "object", "properties": {"name": {"type": "string"},
                                                              "age": {"type": "integer"}}}},
}
JS_V2: dict[str, Any] = {**JS_V1, "properties": {  # an optional field as Confluent's Java generator writes it
    **JS_V1["properties"],
    "note": {"oneOf": [{"type": "null", "title": "Not included"}, {"type": "string"}]}}}
JS_COLUMNS = ["id", "name", "amount", "at", "paid", "who", "tags", "pad", "note"]  # the latest (V2)'s
JS_BAD = {150: "unknown", 450: "corrupt", 750: "wrong type", 1050: "plain", 1350: "no name"}  # 1st segment
JS_TOMBSTONE = 900


def _js_doc(i: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": i, "name": f"order-{i}", "amount": None if i % 4 == 0 else i / 8,
                           "at": f"2026-11-20T{i % 24:02d}:{i % 60:02d}:00.{i % 1000:03d}+02:00",
                           "paid": i % 3 == 0, "who": {"name": f"c{i}", "age": i % 90},
                           "tags": [f"t{j}" for j in range(i % 3)], "pad": "p" * 400}
    if i % 2 == 1:
        doc["note"] = f"note {i}"  # V2
    return doc


def _produce_json_schema(bs: str, topic: str, ids: tuple[int, int]) -> None:
    """As Confluent's JSON Schema serializer frames them, with bad values among them."""
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})  # uncompressed
    for i in range(3000):
        doc = _js_doc(i)
        value: bytes | None = confluent_json(ids[i % 2], doc)
        kind = JS_BAD.get(i)
        if kind == "unknown":
            value = confluent_json(987_654, doc)
        elif kind == "corrupt":
            value = confluent_json(ids[0], doc)[:40]
        elif kind == "wrong type":
            value = confluent_json(ids[0], {**doc, "id": "seven hundred"})
        elif kind == "plain":
            value = json.dumps(doc).encode()
        elif kind == "no name":
            value = confluent_json(ids[0], {k: v for k, v in doc.items() if k != "name"})
        elif i == JS_TOMBSTONE:
            value = None
        p.produce(topic, key=f"s{i}".encode(), value=value, partition=0)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@dataclass
class AvroWorld:
    topic: str
    json_topic: str
    bootstrap: str
    registry: SchemaRegistryServer
    sidecar: dict[str, Any]
    catalog: dict[str, str]
    tmp: Path
    truth: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value) a consumer read
    js_topic: str = ""
    fetcher: Any = None
    json_topic2: str = ""  # a second JSON topic (other ids), for a table both share

    def iceberg(self, name: str, **decode: Any) -> dict[str, Any]:
        return {"catalog": self.catalog, "table_name": name + "_{topic}",
                "decode": {"format": "avro", "fields": FIELDS, "schema_registry": {"url": self.registry.url},
                           **decode}}

    def config(self, name: str, **decode: Any) -> Path:
        work = self.tmp / f"reader-{name}"
        reader = {**self.sidecar, "work_dir": str(work), "metadata": topic_rlmm(self.bootstrap, work),
                  "read": {"fetch_max_wait_ms": 30_000}, "iceberg": self.iceberg(name, **decode)}
        del reader["log_dirs"]
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(reader))
        return path


def _produce(bs: str, topic: str, ids: tuple[int, int]) -> None:
    rnd = random.Random(24)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5,
                  "compression.type": "zstd"})
    t0 = datetime(2026, 11, 20, tzinfo=UTC)
    for i in range(N):
        v2 = i % 2 == 1
        rec: dict[str, Any] = {"id": i, "name": f"order-{i}", "amount": None if i % 5 == 0 else i / 8,
                               "at": t0 + timedelta(milliseconds=37 * i),
                               "tags": [f"t{j}" for j in range(i % 3)], "pad": rnd.randbytes(400)}
        if v2:
            rec["note"] = None if i % 3 == 0 else f"note {i}"
        value: bytes | None = confluent_avro(ids[v2], V2 if v2 else V1, rec)
        kind = BAD.get(i)
        if kind == "unknown":
            value = b"\0" + (987_654).to_bytes(4, "big") + value[5:]
        elif kind == "corrupt":
            value = value[:12]
        elif kind == "plain":
            value = b"not avro at all"
        elif i == TOMBSTONE:
            value = None
        p.produce(topic, key=f"k{i}".encode(), value=value, partition=0)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


@pytest.fixture(scope="module")
def avro_world(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AvroWorld]:
    from fetcher import RemoteFetcher

    tmp = tmp_path_factory.mktemp("iceberg-decode")
    bs = kafka.bootstrap
    topic = f"ice-avro-{uuid.uuid4().hex[:8]}"
    json_topic = f"ice-json-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)  # 1 MiB segments: the values span several
    js_topic = f"ice-jsonschema-{uuid.uuid4().hex[:8]}"
    create_topic(bs, json_topic)
    create_topic(bs, js_topic)
    json_topic2 = f"ice-json2-{uuid.uuid4().hex[:8]}"
    create_topic(bs, json_topic2)
    _produce_json(bs, json_topic)
    _produce_json(bs, json_topic2, first_id=100_000)
    with schema_registry() as registry:
        ids = (register(registry.url, f"{topic}-value", V1), register(registry.url, f"{topic}-value", V2))
        assert ids[0] != ids[1]
        _produce(bs, topic, ids)
        js_ids = (register_json_schema(registry.url, f"{js_topic}-value", JS_V1),
                  register_json_schema(registry.url, f"{js_topic}-value", JS_V2))
        _produce_json_schema(bs, js_topic, js_ids)
        work = tmp / "work"
        sidecar: dict[str, Any] = {
            "log_dirs": [str(kafka.log_dir)], "work_dir": str(work), "bootstrap_servers": bs,
            "storage": {"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
            "metadata": topic_rlmm(bs, work),
            "topics": [{"pattern": t, "remote.storage.enable": True, "retention.ms": -1,
                        "retention.bytes": -1} for t in (topic, json_topic, js_topic, json_topic2)],
            "task_interval_ms": 200, "http": {"enabled": False},
        }
        d = Daemon(load_config(None, **sidecar), once=True).start()
        assert d.run_once() == 0
        assert d.stop()
        (tmp / "wh").mkdir()
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp / 'catalog.db'}",
                   "warehouse": (tmp / "wh").as_uri()}
        w = AvroWorld(topic, json_topic, bs, registry, sidecar, catalog, tmp, [], js_topic,
                      json_topic2=json_topic2)
        with RemoteFetcher.from_config(load_config(w.config("plan"))) as f:
            w.fetcher = f
            plan = f.plan(topic, 0)
            assert len(plan.segments) >= 2 and plan.log_end > 3900
            w.truth = [(r[0], r[3], r[4]) for r in consumed(bs, topic, int(plan.log_end))]
            yield w


def _expected(world: AvroWorld) -> tuple[list[dict[str, Any]], list[tuple[int, bytes | None, bytes | None]]]:
    """What the table and the dead-letter table must hold: the consumer's records, decoded here."""
    schemas = {sid: fastavro.parse_schema(json.loads(text))
               for sid, (text, kind) in world.registry.registry.schemas.items() if kind == "AVRO"}
    good: list[dict[str, Any]] = []
    dead: list[tuple[int, bytes | None, bytes | None]] = []
    for offset, key, value in world.truth:
        i = int(key.decode()[1:]) if key else -1
        if i in BAD:
            dead.append((offset, key, value))
            continue
        row: dict[str, Any] = {"offset": offset, "key": key, "value": value, **dict.fromkeys(COLUMNS)}
        if value is not None:
            schema = schemas[int.from_bytes(value[1:5], "big")]
            rec = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
            row.update({c: rec.get(c) for c in COLUMNS})
        good.append(row)
    return good, dead


def _read(catalog: dict[str, str], ident: str, columns: list[str]) -> list[dict[str, Any]]:
    t = load_catalog("rlm", **catalog).load_table(ident)
    rows = t.scan(selected_fields=tuple(columns)).to_arrow().sort_by([("offset", "ascending")])
    return list(rows.to_pylist())


def test_avro_values_decode_to_typed_columns_and_bad_ones_reach_the_dead_letter_table(
        avro_world: AvroWorld) -> None:
    w = avro_world
    before = w.registry.by_id_requests
    result = run_iceberg(w.config("avro"), w.topic, "--from", "earliest")
    good, dead = _expected(w)
    assert result["dead_letter_table"] == result["table"] + "_dead_letter"
    assert result["dead_letter_rows"] == len(BAD) == len(dead)
    assert result["rows"] == len(good) == len(w.truth) - len(BAD)
    assert w.registry.by_id_requests - before == 3  # the two schemas and the unknown id, once each
    rows = _read(w.catalog, result["table"], ["offset", "key", "value", *COLUMNS])
    assert rows == good  # typed columns equal the produced records; raw values kept
    assert rows[1]["at"] == datetime(2026, 11, 20, 0, 0, 0, 37000, tzinfo=UTC)
    table = load_catalog("rlm", **w.catalog).load_table(result["table"])
    assert str(table.schema().find_field("at").field_type) == "timestamptz"
    assert str(table.schema().find_field("tags").field_type) == "list<string>"

    dl = _read(w.catalog, result["dead_letter_table"], ["offset", "key", "value", "reason", "schema_id"])
    assert [(r["offset"], r["key"], r["value"]) for r in dl] == dead
    by_kind = {BAD[int(r["key"].decode()[1:])]: r for r in dl}
    assert by_kind["unknown"]["reason"] == "unknown schema id 987654 (the registry has no such id)"
    assert by_kind["unknown"]["schema_id"] == 987654
    assert by_kind["corrupt"]["reason"].startswith("corrupt Avro payload for schema id ")
    assert by_kind["plain"]["reason"] == "not Confluent wire format (magic byte 110)"
    # a rerun (in-process: the same code) adds nothing to either table
    from rlm.tables import IcebergSync, read_ledger

    cfg = IcebergConfig.model_validate(w.iceberg("avro"))
    again = IcebergSync(w.fetcher, load_catalog("rlm", **w.catalog), cfg, w.topic)
    assert (again.run_once().added_segments, read_ledger(again.table).rows) == (0, len(good))
    assert again.decoding is not None and again.decoding.summary()["dead_letter_rows"] == len(BAD)


def test_a_crash_between_the_dead_letter_and_the_main_commit(avro_world: AvroWorld,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer dies after the dead-letter commit, before the main one: the dead-letter table
    holds the group's segments, the main table nothing; the rerun adds the main rows and no
    dead letter twice. With ``keep_value: false`` the decoded rows carry no raw bytes."""
    import rlm.tables.writer as writer
    from rlm.tables import IcebergSync, read_ledger

    w = avro_world

    def die() -> None:
        raise KeyboardInterrupt("killed before the main commit")

    cfg = IcebergConfig.model_validate({**w.iceberg("crash", keep_value=False), "segments_per_commit": 100})
    catalog = load_catalog("rlm", **w.catalog)
    monkeypatch.setattr(writer, "_hold_before_commit", die)
    with pytest.raises(KeyboardInterrupt):
        IcebergSync(w.fetcher, catalog, cfg, w.topic).run_once()
    monkeypatch.undo()
    sync = IcebergSync(w.fetcher, catalog, cfg, w.topic)
    assert sync.decoding is not None
    dl_table = catalog.load_table(sync.decoding.identifier)
    assert len(read_ledger(dl_table).segments) >= 2 and len(dl_table.snapshots()) == 1
    assert read_ledger(sync.table).segments == {}
    r = sync.run_once()
    assert r.dead_letters == 0 and r.added_segments == len(w.fetcher.plan(w.topic, 0).segments)
    good, dead = _expected(w)
    dl = _read(w.catalog, sync.decoding.identifier, ["offset", "key", "value"])
    assert [(x["offset"], x["key"], x["value"]) for x in dl] == dead  # each once
    assert len(catalog.load_table(sync.decoding.identifier).snapshots()) == 1
    rows = _read(w.catalog, sync.identifier, ["offset", "key", "value", *COLUMNS])
    assert rows == [{**g, "value": None} for g in good]


def test_json_values_decode_to_typed_columns_and_bad_ones_reach_the_dead_letter_table(
        avro_world: AvroWorld) -> None:
    """A JSON topic (tiered in the same pass): an in-process writer, as ``rlm iceberg`` runs it."""
    from rlm.tables import IcebergSync

    w = avro_world
    plan = w.fetcher.plan(w.json_topic, 0)
    assert len(plan.segments) >= 1 and plan.log_end > max(JSON_BAD)
    truth = [(r[0], r[3], r[4]) for r in consumed(w.bootstrap, w.json_topic, int(plan.log_end))]
    cfg = IcebergConfig.model_validate({"catalog": w.catalog, "table_name": "json_{topic}",
                                        "decode": {"format": "json", "fields": JSON_FIELDS}})
    sync = IcebergSync(w.fetcher, load_catalog("rlm", **w.catalog), cfg, w.json_topic)
    r = sync.run_once()
    assert sync.decoding is not None
    assert r.added_segments == len(plan.segments) and r.dead_letters == len(JSON_BAD)
    names = [f["name"] for f in JSON_FIELDS]
    assert _read(w.catalog, sync.identifier, ["offset", *names]) == _json_expected(truth)
    dl = _read(w.catalog, sync.decoding.identifier, ["offset", "key", "value", "reason"])
    assert [(d["offset"], d["key"], d["value"]) for d in dl] == [t for t in truth
                                                                  if int(t[1][1:]) in JSON_BAD]
    reasons = {int(d["key"][1:]): d["reason"] for d in dl}
    assert "changed from number to string" in reasons[100]
    assert reasons[700].startswith("JSON does not decode: ")
    assert "couldn't parse:2026" in reasons[1000]


def _json_expected(truth: list[tuple[int, bytes | None, bytes | None]]) -> list[dict[str, Any]]:
    """The decoded rows of a JSON topic's consumer read (the bad values left out), in offset order."""
    names = [f["name"] for f in JSON_FIELDS]
    want = []
    for offset, key, value in truth:
        assert key is not None and value is not None
        if int(key.decode()[1:]) in JSON_BAD:
            continue
        doc = json.loads(value)
        doc["at"] = datetime.fromisoformat(doc["at"]).astimezone(UTC)
        want.append({"offset": offset, **{n: doc[n] for n in names}})
    return want


def test_json_values_of_two_topics_in_one_shared_table(avro_world: AvroWorld) -> None:
    """Two JSON topics (their partition 0 offsets overlap, their ids do not) in one shared table
    (``shared_tables``, one ``decode``): ``rlm iceberg --topic A`` then B's writer; each topic's
    decoded columns equal its consumer's records parsed with ``json``; the shared dead-letter
    table holds each topic's bad values with their topic and reasons, its ledger per topic;
    reruns add nothing to either table."""
    from pyiceberg.expressions import EqualTo

    from rlm.tables import IcebergSync, read_ledger

    w = avro_world
    topics = (w.json_topic, w.json_topic2)
    iceberg = {"catalog": w.catalog,
               "shared_tables": [{"name": "json_both", "topics": [w.json_topic, "ice-json2-*"]}],
               "decode": {"format": "json", "fields": JSON_FIELDS}}
    path = w.config("jsonshared")
    raw = yaml.safe_load(path.read_text())
    raw["iceberg"] = iceberg
    path.write_text(yaml.safe_dump(raw))
    plans = {t: w.fetcher.plan(t, 0) for t in topics}
    truths = {t: [(r[0], r[3], r[4]) for r in consumed(w.bootstrap, t, int(plans[t].log_end))]
              for t in topics}
    result = run_iceberg(path, topics[0])
    assert result["table"] == "kafka.json_both"
    assert result["dead_letter_table"] == "kafka.json_both_dead_letter"
    assert result["added_segments"] == len(plans[topics[0]].segments)
    assert result["dead_letter_rows"] == len(JSON_BAD)
    cfg = IcebergConfig.model_validate(iceberg)
    catalog = load_catalog("rlm", **w.catalog)
    r = IcebergSync(w.fetcher, catalog, cfg, topics[1]).run_once()
    assert (r.added_segments, r.dead_letters) == (len(plans[topics[1]].segments), len(JSON_BAD))

    names = [f["name"] for f in JSON_FIELDS]
    table = catalog.load_table("kafka.json_both")
    dead_table = catalog.load_table("kafka.json_both_dead_letter")
    assert [f.name for f in table.spec().fields] == ["topic", "timestamp_day"]
    for t in topics:
        got = table.scan(row_filter=EqualTo("topic", t), selected_fields=("offset", *names)).to_arrow()
        want = _json_expected(truths[t])
        assert got.sort_by([("offset", "ascending")]).to_pylist() == want, t
        assert want[0]["id"] == (0 if t == topics[0] else 100_000)
        dl = (dead_table.scan(row_filter=EqualTo("topic", t),
                              selected_fields=("offset", "key", "value", "reason"))
              .to_arrow().sort_by([("offset", "ascending")]).to_pylist())
        bad = [x for x in truths[t] if x[1] is not None and int(x[1][1:]) in JSON_BAD]
        assert [(d["offset"], d["key"], d["value"]) for d in dl] == bad
        assert "changed from number to string" in {int(d["key"][1:]): d["reason"] for d in dl}[100]
        assert read_ledger(dead_table, t).segments.keys() <= read_ledger(table, t).segments.keys()
        assert read_ledger(dead_table, t).rows == len(JSON_BAD)
    dead_topics = dead_table.scan(selected_fields=("topic",)).to_arrow().column("topic").to_pylist()
    assert sorted(dead_topics) == sorted(t for t in topics for _ in JSON_BAD)
    snaps = (len(table.snapshots()), len(dead_table.snapshots()))
    for t in topics:
        assert IcebergSync(w.fetcher, catalog, cfg, t).run_once().added_segments == 0
    assert (len(catalog.load_table("kafka.json_both").snapshots()),
            len(catalog.load_table("kafka.json_both_dead_letter").snapshots())) == snaps


def test_two_writers_at_once_put_each_record_once_in_one_table(avro_world: AvroWorld) -> None:
    """Two in-process writers of the same tables at once, a snapshot per segment: whichever wins
    each commit, every record is once in the table or once in the dead-letter table."""

    from rlm.tables import IcebergSync

    w = avro_world
    cfg = IcebergConfig.model_validate({**w.iceberg("pair"), "segments_per_commit": 1})
    syncs = [IcebergSync(w.fetcher, load_catalog("rlm", **w.catalog), cfg, w.topic) for _ in range(2)]
    results = run_at_once(syncs)
    assert sum(r.added_segments for r in results) == len(w.fetcher.plan(w.topic, 0).segments)
    good, dead = _expected(w)
    assert syncs[0].decoding is not None
    dl = _read(w.catalog, syncs[0].decoding.identifier, ["offset", "key", "value"])
    assert [(x["offset"], x["key"], x["value"]) for x in dl] == dead
    assert _read(w.catalog, syncs[0].identifier, ["offset", "key", "value", *COLUMNS]) == good


def test_json_schema_values_decode_to_typed_columns_and_bad_ones_reach_the_dead_letter_table(
        avro_world: AvroWorld) -> None:
    """``rlm iceberg`` (the command) on Confluent-framed JSON under two JSON Schema versions, the
    columns taken from the subject's latest schema: typed columns equal the consumer's records
    parsed with ``json``; the unknown schema id, the corrupt payload, the wrong member type, the
    unframed value and the missing required property in the dead-letter table with their reasons."""
    w = avro_world
    plan = w.fetcher.plan(w.js_topic, 0)
    assert len(plan.segments) >= 1 and plan.log_end > max(JS_BAD)
    truth = [(r[0], r[3], r[4]) for r in consumed(w.bootstrap, w.js_topic, int(plan.log_end))]
    path = w.config("js")
    cfg = yaml.safe_load(path.read_text())
    cfg["iceberg"]["decode"] = {"format": "json_schema", "subject": f"{w.js_topic}-value",
                                "schema_registry": {"url": w.registry.url}, "keep_value": False}
    path.write_text(yaml.safe_dump(cfg))
    result = run_iceberg(path, w.js_topic, "--from", "earliest")
    want: list[dict[str, Any]] = []
    dead: list[tuple[int, bytes | None, bytes | None]] = []
    for offset, key, value in truth:
        assert key is not None
        if int(key[1:]) in JS_BAD:
            dead.append((offset, key, value))
            continue
        row: dict[str, Any] = {"offset": offset, "value": None, **dict.fromkeys(JS_COLUMNS)}
        if value is not None:
            doc = json.loads(value[5:])
            doc["at"] = datetime.fromisoformat(doc["at"]).astimezone(UTC)
            row.update({c: doc.get(c) for c in JS_COLUMNS})
        want.append(row)
    assert [r["offset"] for r in want if r["id"] is None] == [
        o for o, k, _ in truth if k == f"s{JS_TOMBSTONE}".encode()]  # the tombstone: null columns
    assert (result["rows"], result["dead_letter_rows"]) == (len(want), len(JS_BAD))
    assert _read(w.catalog, result["table"], ["offset", "value", *JS_COLUMNS]) == want
    table = load_catalog("rlm", **w.catalog).load_table(result["table"])
    types = {c: str(table.schema().find_field(c).field_type) for c in JS_COLUMNS}
    assert types == {"id": "long", "name": "string", "amount": "double", "at": "timestamptz",
                     "paid": "boolean", "who": types["who"], "tags": "list<string>", "pad": "string",
                     "note": "string"}
    assert types["who"].startswith("struct<") and "name: optional string" in types["who"]
    dl = _read(w.catalog, result["dead_letter_table"], ["offset", "key", "value", "reason", "schema_id"])
    assert [(d["offset"], d["key"], d["value"]) for d in dl] == dead
    by_kind = {JS_BAD[int(d["key"][1:])]: d for d in dl}
    assert by_kind["unknown"]["reason"] == "unknown schema id 987654 (the registry has no such id)"
    assert by_kind["unknown"]["schema_id"] == 987654
    assert by_kind["corrupt"]["reason"].startswith("JSON does not decode: ")
    assert "changed from number to string" in by_kind["wrong type"]["reason"]
    assert by_kind["plain"]["reason"] == "not Confluent wire format (magic byte 123)"
    assert by_kind["plain"]["schema_id"] is None
    assert by_kind["no name"]["reason"] == "required field 'name' is missing or null"
    v1_id = w.registry.registry.subjects[f"{w.js_topic}-value"][0]
    assert [by_kind[k]["schema_id"] for k in ("corrupt", "wrong type", "no name")] == [v1_id] * 3
