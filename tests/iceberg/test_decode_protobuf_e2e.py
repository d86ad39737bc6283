"""``rlm iceberg`` with Protobuf decoding, end to end: a real broker, the local storage plugin, the
topic metadata store, the SQL catalog and the in-process Confluent-API registry stand-in.

The values are written by confluent-kafka's own ``ProtobufSerializer`` (message classes generated
by ``grpc_tools.protoc`` at test time), which registers the schema's import as a reference of its
own subject; a corrupt payload and an unknown schema id are among them, plus a tombstone. The
topic is tiered, then ``rlm iceberg`` (the command) decodes it: the typed columns equal the
produced messages row for row, the two bad records are in the dead-letter table with their
reasons.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

from rlm.config import load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, topic_rlmm
from tests.iceberg.test_decode_protobuf import COLUMN_TYPES, CORRUPT, _order, _row, pb2, unordered_maps
from tests.iceberg.test_iceberg import consumed, run_iceberg
from tests.services.kafka import KafkaCluster
from tests.services.schema_registry import schema_registry

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 3000
BAD = {300: "corrupt", 900: "unknown"}  # in the first (tiered) segment
TOMBSTONE = 600
COLUMNS = list(COLUMN_TYPES)


def _pad(i: int) -> bytes:
    return random.Random(i).randbytes(400)  # ~1.5 MB in all: the 1 MiB segments roll


def _produce(bs: str, topic: str, url: str) -> None:
    serialize = ProtobufSerializer(pb2().Order, SchemaRegistryClient({"url": url}),
                                   {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    for i in range(N):
        msg = _order(i)
        msg.raw = _pad(i)
        value: bytes | None = serialize(msg, ctx)
        assert value is not None
        if BAD.get(i) == "corrupt":
            value += b"\xff"  # a truncated varint after the last field
        elif BAD.get(i) == "unknown":
            value = b"\0" + (987_654).to_bytes(4, "big") + value[5:]
        elif i == TOMBSTONE:
            value = None
        p.produce(topic, key=f"p{i}".encode(), value=value, partition=0)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _read(catalog: dict[str, str], ident: str, columns: list[str]) -> list[dict[str, Any]]:
    t = load_catalog("rlm", **catalog).load_table(ident)
    rows = t.scan(selected_fields=tuple(columns)).to_arrow().sort_by([("offset", "ascending")])
    return list(rows.to_pylist())


def test_protobuf_values_decode_to_typed_columns_and_bad_ones_reach_the_dead_letter_table(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    bs = kafka.bootstrap
    topic = f"ice-proto-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    with schema_registry() as registry:
        _produce(bs, topic, registry.url)
        subject = f"{topic}-value"
        assert registry.registry.references[registry.registry.subjects[subject][-1]] == [
            {"name": "rlmtest/common.proto", "subject": "rlmtest/common.proto", "version": 1}]
        work = tmp_path / "work"
        sidecar: dict[str, Any] = {
            "log_dirs": [str(kafka.log_dir)], "work_dir": str(work), "bootstrap_servers": bs,
            "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote"), "fsync": False}},
            "metadata": topic_rlmm(bs, work),
            "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1,
                        "retention.bytes": -1}],
            "task_interval_ms": 200, "http": {"enabled": False},
        }
        d = Daemon(load_config(None, **sidecar), once=True).start()
        assert d.run_once() == 0
        assert d.stop()
        (tmp_path / "wh").mkdir()
        catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                   "warehouse": (tmp_path / "wh").as_uri()}
        reader_work = tmp_path / "reader"
        reader = {**sidecar, "work_dir": str(reader_work), "metadata": topic_rlmm(bs, reader_work),
                  "read": {"fetch_max_wait_ms": 30_000},
                  "iceberg": {"catalog": catalog, "table_name": "pb_{topic}",
                              "decode": {"format": "protobuf", "subject": subject,
                                         "schema_registry": {"url": registry.url}}}}
        del reader["log_dirs"]
        path = tmp_path / "pb.yaml"
        path.write_text(yaml.safe_dump(reader))
        result = run_iceberg(path, topic, "--from", "earliest")
    rows = _read(catalog, result["table"], ["offset", "key", "value", *COLUMNS])
    assert rows, "no segment tiered"
    end = rows[-1]["offset"] + 1
    truth = [(r[0], r[3], r[4]) for r in consumed(bs, topic, end)]
    want: list[dict[str, Any]] = []
    dead = []
    for offset, key, value in truth:
        assert key is not None
        i = int(key[1:])
        if i in BAD:
            dead.append((offset, key, value))
            continue
        # a tombstone's columns are null; PyIceberg 0.12's writer stores a null list or map of
        # structs as an empty one (the same for every decoder's columns: docs/iceberg.md)
        row = ({**dict.fromkeys(COLUMNS), "lines": [], "prices": []} if value is None
               else {**_row(i), "raw": _pad(i)})
        want.append({"offset": offset, "key": key, "value": value, **row})
    assert max(BAD) < len(truth)
    assert (result["rows"], result["dead_letter_rows"]) == (len(want), len(BAD))
    assert unordered_maps(rows) == want  # typed columns equal the produced messages, row for row
    assert any(r["key"] == f"p{TOMBSTONE}".encode() and r["i32"] is None and r["tags"] is None for r in rows)
    table = load_catalog("rlm", **catalog).load_table(result["table"])
    assert str(table.schema().find_field("at").field_type) == "timestamptz"
    assert str(table.schema().find_field("counts").field_type) == "map<string, long>"
    dl = _read(catalog, result["dead_letter_table"], ["offset", "key", "value", "reason", "schema_id"])
    assert [(r["offset"], r["key"], r["value"]) for r in dl] == dead
    by_kind = {BAD[int(r["key"][1:])]: r for r in dl}
    sid = registry.registry.subjects[subject][-1]
    head = f"corrupt Protobuf payload for schema id {sid} (rlmtest.Order): "
    assert by_kind["corrupt"]["reason"] in {head + why for why in CORRUPT.values()}
    assert by_kind["corrupt"]["schema_id"] == sid
    assert by_kind["unknown"]["reason"] == "unknown schema id 987654 (the registry has no such id)"
    assert by_kind["unknown"]["schema_id"] == 987_654
