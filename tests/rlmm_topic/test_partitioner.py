"""The metadata partition of a user partition must match Kafka's own partitioner class exactly."""

from __future__ import annotations

import random

from rlm.types import KafkaUuid, TopicIdPartition
from rlmm.partitioner import RemoteLogMetadataTopicPartitioner, java_objects_hash_lli, murmur2
from tests.rlmm_topic.golden import KafkaGolden


def test_murmur2_known_values() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_objects_hash_wraps_like_java() -> None:
    tid = KafkaUuid(bytes(range(16)))
    assert java_objects_hash_lli(tid.least_significant_bits, tid.most_significant_bits, 0) == -1886387233


def _sample_ids(rng: random.Random, n: int) -> list[KafkaUuid]:
    ids = [KafkaUuid(bytes(range(16))), KafkaUuid(b"\xff" * 16), KafkaUuid(b"\x80" + bytes(15)),
           KafkaUuid(bytes(15) + b"\x02")]
    while len(ids) < n:
        ids.append(KafkaUuid(rng.randbytes(16)))
    return ids


def test_partitioner_matches_kafka(kafka_golden: KafkaGolden) -> None:
    rng = random.Random(405)
    cases = [(tid, p, n) for n in (1, 5, 50, 97) for tid in _sample_ids(rng, 150)
             for p in (0, 1, rng.randrange(2, 1000), rng.randrange(1000, 2**31 - 1))]
    want = kafka_golden.run("partition", [f"{tid.text} {p} {n}" for tid, p, n in cases])
    got = [str(RemoteLogMetadataTopicPartitioner(n).metadata_partition(TopicIdPartition(tid, "t", p)))
           for tid, p, n in cases]
    mismatches = [(c, w, g) for c, w, g in zip(cases, want, got, strict=True) if w != g]
    assert not mismatches, mismatches[:5]
    assert len(cases) == 2400
    for n in (5, 50, 97):
        assert len({g for (_, _, m), g in zip(cases, got, strict=True) if m == n}) > 1
