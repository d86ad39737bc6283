"""Random metadata records and the one-line "spec" text the Java harness reads and prints.

One text form for both sides lets the golden tests compare every field (custom metadata as
hex, ``-`` for none, ``=`` for empty; epochs ``e:o,e:o`` ascending) with a plain string compare.
"""

from __future__ import annotations

import random

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.serde import RemoteLogMetadata, RemoteLogSegmentMetadataSnapshot

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


def _custom(c: bytes | None) -> str:
    if c is None:
        return "-"
    return c.hex() if c else "="


def _epochs(e: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{k}:{v}" for k, v in e)


def _tp(tp: TopicIdPartition) -> str:
    return f"{tp.topic_id.text} {tp.topic} {tp.partition}"


def spec(md: RemoteLogMetadata) -> str:
    if isinstance(md, RemoteLogSegmentMetadata):
        return " ".join(str(x) for x in (
            "SEG", _tp(md.topic_id_partition), md.remote_log_segment_id.id.text, md.start_offset,
            md.end_offset,
            md.max_timestamp_ms, md.broker_id, md.event_timestamp_ms, md.segment_size_in_bytes, int(md.state),
            _custom(md.custom_metadata), int(md.txn_index_empty), _epochs(md.segment_leader_epochs)))
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        return " ".join(str(x) for x in (
            "UPD", _tp(md.topic_id_partition), md.remote_log_segment_id.id.text, md.event_timestamp_ms,
            md.broker_id, int(md.state), _custom(md.custom_metadata)))
    if isinstance(md, RemotePartitionDeleteMetadata):
        return " ".join(str(x) for x in (
            "DEL", _tp(md.topic_id_partition), int(md.state), md.event_timestamp_ms, md.broker_id))
    return " ".join(str(x) for x in (
        "SNAP", md.segment_id.text, md.start_offset, md.end_offset, md.max_timestamp_ms, md.broker_id,
        md.event_timestamp_ms, md.segment_size_in_bytes, int(md.state), _custom(md.custom_metadata),
        int(md.txn_index_empty), _epochs(md.segment_leader_epochs)))


def random_tp(rng: random.Random) -> TopicIdPartition:
    name = "".join(rng.choice(TOPIC_CHARS) for _ in range(rng.randint(1, 60)))
    return TopicIdPartition(KafkaUuid(rng.randbytes(16)), name, rng.choice([0, 1, rng.randrange(2**31)]))


def _random_custom(rng: random.Random) -> bytes | None:
    return rng.choice([None, b"", rng.randbytes(rng.randint(1, 128)), rng.randbytes(300)])


def _random_long(rng: random.Random) -> int:
    return rng.choice([0, 1, rng.randrange(2**40), 2**63 - 1])


def _random_segment_fields(rng: random.Random) -> dict[str, object]:
    start = rng.choice([0, rng.randrange(2**50)])
    end = start + rng.choice([0, rng.randrange(10**9)])
    n = rng.randint(1, 6)
    epochs = sorted(rng.sample(range(0, 2**31 - 1), n))
    offsets = sorted(rng.randint(start, end) for _ in range(n))
    offsets[0] = start
    return dict(start_offset=start, end_offset=end, max_timestamp_ms=_random_long(rng),
                broker_id=rng.choice([0, 1, rng.randrange(2**31)]), event_timestamp_ms=_random_long(rng),
                segment_size_in_bytes=rng.choice([0, rng.randrange(2**31)]),
                segment_leader_epochs=tuple(zip(epochs, offsets, strict=True)),
                state=rng.choice(list(RemoteLogSegmentState)), custom_metadata=_random_custom(rng),
                txn_index_empty=rng.random() < 0.5)


def random_record(rng: random.Random, kind: str) -> RemoteLogMetadata:
    if kind == "SEG":
        sid = RemoteLogSegmentId(random_tp(rng), KafkaUuid(rng.randbytes(16)))
        return RemoteLogSegmentMetadata(remote_log_segment_id=sid, **_random_segment_fields(rng))  # type: ignore[arg-type]
    if kind == "UPD":
        return RemoteLogSegmentMetadataUpdate(
            RemoteLogSegmentId(random_tp(rng), KafkaUuid(rng.randbytes(16))), _random_long(rng),
            rng.choice(list(RemoteLogSegmentState)), rng.randrange(2**31), _random_custom(rng))
    if kind == "DEL":
        return RemotePartitionDeleteMetadata(random_tp(rng), rng.choice(list(RemotePartitionDeleteState)),
                                             _random_long(rng), rng.randrange(2**31))
    return RemoteLogSegmentMetadataSnapshot(segment_id=KafkaUuid(rng.randbytes(16)),
                                            **_random_segment_fields(rng))  # type: ignore[arg-type]


def random_records(seed: int, per_kind: int) -> list[RemoteLogMetadata]:
    rng = random.Random(seed)
    return [random_record(rng, kind) for kind in ("SEG", "UPD", "DEL", "SNAP") for _ in range(per_kind)]


# ---- Kafka's toString() forms, as printed by RemoteLogMetadataSerde$RemoteLogMetadataFormatter ----
def _j_tp(tp: TopicIdPartition) -> str:
    return f"{tp.topic_id.text}:{tp.topic}-{tp.partition}"


def _j_custom(c: bytes | None) -> str:
    return "Optional.empty" if c is None else f"Optional[CustomMetadata{{{len(c)} bytes}}]"


def _j_epochs(e: tuple[tuple[int, int], ...]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in e) + "}"


def kafka_to_string(md: RemoteLogMetadata) -> str:
    """What Kafka 4.1's ``toString()`` prints for the decoded record (custom metadata: size only)."""
    if isinstance(md, RemoteLogSegmentMetadata):
        sid = md.remote_log_segment_id
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
                f"{_j_tp(sid.topic_id_partition)}, id={sid.id.text}}}, startOffset={md.start_offset}, "
                f"endOffset={md.end_offset}, brokerId={md.broker_id}, maxTimestampMs={md.max_timestamp_ms}, "
                f"eventTimestampMs={md.event_timestamp_ms}, "
                f"segmentLeaderEpochs={_j_epochs(md.segment_leader_epochs)}, "
                f"segmentSizeInBytes={md.segment_size_in_bytes}, "
                f"customMetadata={_j_custom(md.custom_metadata)}, "
                f"state={md.state.name}, txnIdxEmpty={str(md.txn_index_empty).lower()}}}")
    if isinstance(md, RemoteLogSegmentMetadataUpdate):
        sid = md.remote_log_segment_id
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
                f"{_j_tp(sid.topic_id_partition)}, id={sid.id.text}}}, "
                f"customMetadata={_j_custom(md.custom_metadata)}, "
                f"state={md.state.name}, eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}")
    if isinstance(md, RemotePartitionDeleteMetadata):
        return (f"RemotePartitionDeleteMetadata{{topicPartition={_j_tp(md.topic_id_partition)}, "
                f"state={md.state.name}, eventTimestampMs={md.event_timestamp_ms}, brokerId={md.broker_id}}}")
    return (f"RemoteLogSegmentMetadataSnapshot{{segmentId={md.segment_id.text}, "
            f"startOffset={md.start_offset}, "
            f"endOffset={md.end_offset}, maxTimestampMs={md.max_timestamp_ms}, "
            f"segmentLeaderEpochs={_j_epochs(md.segment_leader_epochs)}, "
            f"segmentSizeInBytes={md.segment_size_in_bytes}, customMetadata={_j_custom(md.custom_metadata)}, "
            f"state={md.state.name}, txnIdxEmpty={str(md.txn_index_empty).lower()}}}")
