"""Value decoding benchmark (``iceberg.decode``): Confluent Avro vs Confluent Protobuf, the same
records (not a test).

The same ``--records`` orders are written both ways — Avro with fastavro under a registered Avro
schema, Protobuf with the message class of a registered ``.proto`` (``Order`` with a long id, a
string, an optional double, a ``google.protobuf.Timestamp``, a repeated string and a nested
message) — framed the Confluent way, against the in-process registry stand-in of the tests. Then,
in interleaved rounds (one warm-up, then ``--rounds``), each decoder of
:mod:`rlm.tables.decode` decodes them in batches of ``--batch`` (Protobuf with each engine
installed: ``upb``, and ``ptars`` when it is) (the writer's batch is a
segment group's values). The decoded columns of both must be equal, row for row, in every round
(else exit 2).

Times are CPU seconds of this process (the machine is shared); printed: records/s per round and
the median.

    .venv/bin/python benchmarks/bench_value_decode.py --records 100000 --batch 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlm.config import SchemaRegistryConfig, ValueDecodeConfig
from rlm.tables.decode import make_decoder
from rlm.tables.protobuf_decode import ProtobufDecoder, load_schema
from rlm.tables.registry import SchemaRegistry
from tests.iceberg.test_decode import register
from tests.iceberg.test_decode_protobuf import register_proto
from tests.services.schema_registry import schema_registry

PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string name = 2;
  optional double amount = 3;
  google.protobuf.Timestamp at = 4;
  repeated string tags = 5;
  Who who = 6;
}

message Who {
  string name = 1;
  int32 age = 2;
}
"""
AVRO: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
               {"name": "amount", "type": ["null", "double"], "default": None},
               {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
               {"name": "tags", "type": {"type": "array", "items": "string"}},
               {"name": "who", "type": {"type": "record", "name": "Who", "fields": [
                   {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}}],
}
FIELDS = [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
          {"name": "amount", "type": "double"}, {"name": "at", "type": "timestamptz"},
          {"name": "tags", "type": "list", "element": {"name": "tag", "type": "string"}},
          {"name": "who", "type": "struct", "fields": [{"name": "name", "type": "string"},
                                                       {"name": "age", "type": "int"}]}]


def _records(n: int) -> list[dict[str, Any]]:
    t0 = datetime(2026, 11, 20, tzinfo=UTC)
    return [{"id": i, "name": f"order-{i}", "amount": None if i % 5 == 0 else i / 8,
             "at": t0 + timedelta(microseconds=37_001 * i), "tags": [f"t{j}" for j in range(i % 4)],
             "who": {"name": f"customer-{i % 1000}", "age": i % 90}} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    recs = _records(args.records)
    with schema_registry() as reg:
        avro_id = register(reg.url, "bench-avro-value", AVRO)
        proto_id = register_proto(reg.url, "bench-proto-value", PROTO)
        parsed = fastavro.parse_schema(AVRO)
        avro_values = []
        for r in recs:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, r)
            avro_values.append(b"\0" + avro_id.to_bytes(4, "big") + buf.getvalue())
        from google.protobuf import message_factory

        client = SchemaRegistry(SchemaRegistryConfig(url=reg.url))
        ws = client.get(proto_id)
        assert ws is not None
        pool = load_schema(client, ws).pool
        order_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Order"))
        proto_values = []
        for r in recs:
            m = order_cls(id=r["id"], name=r["name"], tags=r["tags"])
            if r["amount"] is not None:
                m.amount = r["amount"]
            m.at.FromDatetime(r["at"])
            m.who.name, m.who.age = r["who"]["name"], r["who"]["age"]
            proto_values.append(b"\0" + proto_id.to_bytes(4, "big") + b"\0" + m.SerializeToString())
        registry = {"url": reg.url}
        decoders: dict[str, tuple[Any, list[bytes]]] = {
            "avro": (make_decoder(ValueDecodeConfig.model_validate(
                {"format": "avro", "fields": FIELDS, "schema_registry": registry})), avro_values),
        }
        proto_cfg = ValueDecodeConfig.model_validate({"format": "protobuf", "subject": "bench-proto-value",
                                                      "schema_registry": registry})
        for engine in ("upb", "ptars") if ProtobufDecoder.engine_default == "ptars" else ("upb",):
            decoders[f"protobuf-{engine}"] = (ProtobufDecoder(proto_cfg, engine=engine), proto_values)
        sizes = {k: sum(map(len, v)) / len(v) for k, (_, v) in decoders.items()}
        rates: dict[str, list[float]] = {k: [] for k in decoders}
        for rnd in range(args.rounds + 1):
            tables = {}
            for name, (dec, values) in decoders.items():
                batches = [pa.array(values[i:i + args.batch], pa.binary())
                           for i in range(0, len(values), args.batch)]
                cpu = time.process_time()
                outs = [dec.decode(b) for b in batches]
                took = time.process_time() - cpu
                if any(o.errors for o in outs):
                    print(f"BENCHMARK FAILED: {name} dead letters", outs[0].errors)
                    return 2
                names = [f.name for f in dec.arrow_schema]
                tables[name] = pa.concat_tables(pa.table(o.columns, names=names) for o in outs)
                if rnd:
                    rates[name].append(len(values) / took)
            a = tables["avro"]
            for name, p in tables.items():
                if a.column_names != p.column_names or a.to_pylist() != p.to_pylist():
                    print(f"BENCHMARK FAILED: the Avro and {name} columns differ")
                    return 2
    out = {k: {"records_per_s": [round(x) for x in v], "median": round(statistics.median(v)),
               "value_bytes": round(sizes[k], 1)} for k, v in rates.items()}
    print(json.dumps({"records": args.records, "batch": args.batch, "cpu": "process", **out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
