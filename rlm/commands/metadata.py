"""``rlm metadata dump``: print remote log metadata records, one per line.

Reads the ``__remote_log_metadata`` topic (``--bootstrap-server``; each metadata partition from
its start to its end offset at the time of the call, partition by partition) or the embedded
store's log (``--dir``; read-only, no lock taken, so it works next to a running daemon). Lines
follow the spirit of Kafka's ``RemoteLogMetadataFormatter``::

    partition:0,message-offset:3,type:RemoteLogSegmentMetadataUpdate,version:0,event-value:{...}

With ``--json`` each line is one JSON object (bytes as base64). An undecodable record is
printed as an ``error`` line and the dump goes on; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rlm.errors import ConfigError, MetadataDecodeError, MetadataUnavailableError, RemoteLogMetadataError
from rlm.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from rlmm.serde import DecodedRecord, RemoteLogMetadata, RemoteLogSegmentMetadataSnapshot, deserialize_record

Obj = dict[str, Any]
DEFAULT_TOPIC = "__remote_log_metadata"


# ---- formatting -----------------------------------------------------------------------------------
def _tip(tp: TopicIdPartition) -> Obj:
    return {"topicId": tp.topic_id.text, "topic": tp.topic, "partition": tp.partition}


def _sid(sid: RemoteLogSegmentId) -> Obj:
    return {"topicIdPartition": _tip(sid.topic_id_partition), "id": sid.id.text}


def _custom(value: bytes | None) -> str | None:
    return base64.b64encode(value).decode() if value is not None else None


def event_value(md: RemoteLogMetadata) -> Obj:
    """The record's fields under Kafka's (camelCase) names; enums by name, bytes as base64."""
    if isinstance(md, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot):
        head: Obj = ({"remoteLogSegmentId": _sid(md.remote_log_segment_id)}
                     if isinstance(md, RemoteLogSegmentMetadata) else {"segmentId": md.segment_id.text})
        return {**head, "startOffset": md.start_offset, "endOffset": md.end_offset,
                "brokerId": md.broker_id, "maxTimestampMs": md.max_timestamp_ms,
                "eventTimestampMs": md.event_timestamp_ms,
                "segmentLeaderEpochs": {str(e): o for e, o in md.segment_leader_epochs},
                "segmentSizeInBytes": md.segment_size_in_bytes, "customMetadata": _custom(md.custom_metadata),
                "state": md.state.name, "txnIndexEmpty": md.txn_index_empty}
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        return {"remoteLogSegmentId": _sid(md.remote_log_segment_id), "brokerId": md.broker_id,
                "eventTimestampMs": md.event_timestamp_ms, "customMetadata": _custom(md.custom_metadata),
                "state": md.state.name}
    assert isinstance(md, RemotePartitionDeleteMetadata)
    return {"topicIdPartition": _tip(md.topic_id_partition), "brokerId": md.broker_id,
            "eventTimestampMs": md.event_timestamp_ms, "state": md.state.name}


def _where_text(where: Obj) -> str:
    return ",".join(f"{k}:{v}" for k, v in where.items())


def emit(out: TextIO, where: Obj, rec: DecodedRecord | None, error: str | None, as_json: bool) -> None:
    """Prints one record (or one decode error) located by ``where`` (partition/offset or position)."""
    if rec is None:
        if as_json:
            out.write(json.dumps({**where, "error": error}) + "\n")
        else:
            out.write(f"{_where_text(where)},error:{error}\n")
        return
    value = event_value(rec.metadata)
    if rec.extras:
        value["extras"] = rec.extras
    kind = type(rec.metadata).__name__
    if as_json:
        out.write(json.dumps({**where, "type": kind, "version": rec.version, "value": value}) + "\n")
    else:
        out.write(f"{_where_text(where)},type:{kind},version:{rec.version},"
                  f"event-value:{json.dumps(value, separators=(',', ':'))}\n")


def _matches(rec: DecodedRecord, user_topic: str | None) -> bool:
    if user_topic is None:
        return True
    md = rec.metadata
    if isinstance(md, RemoteLogSegmentMetadataSnapshot):
        return False
    return md.topic_id_partition.topic == user_topic


# ---- sources ------------------------------------------------------------------------------------------
Item = tuple[Obj, bytes]


def file_records(directory: Path) -> Iterator[Item]:
    from rlmm.file_log import LOG_FILE, LogScan

    path = Path(directory) / LOG_FILE
    if not path.exists():
        raise RemoteLogMetadataError(f"{path}: no metadata log here")
    scan = LogScan(path)
    for n, (pos, payload) in enumerate(scan):
        yield {"record": n, "position": pos}, payload
    if scan.torn_at is not None:
        print(f"rlm: note: {path}: torn last write at byte {scan.torn_at} ignored", file=sys.stderr)


def topic_records(bootstrap: str, topic: str, partitions: list[int] | None, timeout_s: float,
                  extra: dict[str, str]) -> Iterator[Item]:
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as KTP

    conf = {"bootstrap.servers": bootstrap, "group.id": f"rlm-metadata-dump-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest",
            **extra}
    consumer = Consumer(conf)
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as e:
            raise MetadataUnavailableError(f"{bootstrap}: cannot read metadata of {topic}: {e}") from e
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            raise RemoteLogMetadataError(f"topic {topic} not found on {bootstrap}")
        for p in sorted(tmeta.partitions):
            if partitions is not None and p not in partitions:
                continue
            try:
                low, high = consumer.get_watermark_offsets(KTP(topic, p), timeout=timeout_s)
            except KafkaException as e:
                raise MetadataUnavailableError(f"{topic}-{p}: cannot read offsets: {e}") from e
            if high <= low:
                continue
            consumer.assign([KTP(topic, p, low)])
            yield from _drain(consumer, topic, p, high, timeout_s)
    finally:
        consumer.close()


def _drain(consumer: Any, topic: str, p: int, high: int, timeout_s: float) -> Iterator[Item]:
    import time

    from confluent_kafka import KafkaError

    deadline = time.monotonic() + timeout_s
    while True:
        msg = consumer.poll(0.2)
        if msg is None:
            if time.monotonic() > deadline:
                raise MetadataUnavailableError(f"{topic}-{p}: timed out before reaching offset {high}")
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return
            raise MetadataUnavailableError(f"{topic}-{p}: {msg.error()}")
        deadline = time.monotonic() + timeout_s
        yield {"partition": p, "message-offset": msg.offset()}, msg.value()
        if msg.offset() >= high - 1:
            return


# ---- command ------------------------------------------------------------------------------------------
def run_dump(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    bad = [kv for kv in args.consumer_property if "=" not in kv]
    if bad:
        raise ConfigError(f"--consumer-property expects KEY=VALUE, got {bad[0]!r}")
    extra = dict(kv.split("=", 1) for kv in args.consumer_property)
    if args.dir is not None:
        items = file_records(Path(args.dir))
    else:
        items = topic_records(args.bootstrap_server, args.topic, args.partition, args.timeout_ms / 1000,
                              extra)
    errors = 0
    for where, value in items:
        try:
            rec = deserialize_record(value, partition=where.get("partition"),
                                     offset=where.get("message-offset", where.get("position")),
                                     source=None if args.dir is None else str(args.dir))
        except MetadataDecodeError as e:
            errors += 1
            emit(out, where, None, e.reason, args.json)
            continue
        if _matches(rec, args.user_topic):
            emit(out, where, rec, None, args.json)
    out.flush()
    return 1 if errors else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("metadata", help="remote log metadata tools")
    sub = p.add_subparsers(dest="metadata_command", metavar="SUBCOMMAND", required=True)
    d = sub.add_parser("dump", help="print metadata records from the topic or the embedded store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = d.add_mutually_exclusive_group(required=True)
    src.add_argument("--dir", type=Path, help="embedded store directory (file metadata manager)")
    src.add_argument("--bootstrap-server", help="Kafka bootstrap servers (read the metadata topic)")
    d.add_argument("--topic", default=DEFAULT_TOPIC, help=f"metadata topic (default {DEFAULT_TOPIC})")
    d.add_argument("--partition", type=int, action="append", help="only this metadata partition (repeatable)")
    d.add_argument("--user-topic", help="only records about this user topic")
    d.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka consumer setting (repeatable), e.g. security.protocol=SSL")
    d.add_argument("--timeout-ms", type=int, default=30_000, help="give up when no progress for this long")
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    d.set_defaults(func=run_dump)
    from .metadata_rebuild import register as register_rebuild

    register_rebuild(sub)
