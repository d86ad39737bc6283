"""Which ``__remote_log_metadata`` partition holds the events of a user partition.

Kafka brokers and this sidecar must agree bit for bit, otherwise a broker's metadata consumer
never sees our events (and we never see theirs). Kafka's
``RemoteLogMetadataTopicPartitioner.metadataPartition`` does *not* hash the topic name: it
hashes the topic id and partition through ``java.util.Objects.hash(lsb, msb, partition)``,
writes that int big-endian into 4 bytes, runs Kafka's producer ``Utils.murmur2`` over them and
takes ``Utils.toPositive(h) % numMetadataPartitions``. This module reproduces those Java
semantics with explicit 32-bit wrap-around; the golden test compares it with Kafka's own class.
"""

from __future__ import annotations

from rlm.types import KafkaUuid, TopicIdPartition

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _to_int32(v: int) -> int:
    """Java ``(int)`` narrowing of an arbitrary Python int."""
    v &= _MASK32
    return v - (1 << 32) if v & 0x80000000 else v


def java_long_hash(v: int) -> int:
    """``Long.hashCode(v)`` = ``(int) (v ^ (v >>> 32))`` for a signed 64-bit ``v``."""
    u = v & _MASK64
    return _to_int32(u ^ (u >> 32))


def java_objects_hash_lli(a: int, b: int, c: int) -> int:
    """``Objects.hash(Long a, Long b, Integer c)`` = ``Arrays.hashCode`` over the boxed values."""
    h = 1
    h = _to_int32(31 * h + java_long_hash(a))
    h = _to_int32(31 * h + java_long_hash(b))
    return _to_int32(31 * h + _to_int32(c))


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default producer partitioner hash) as a signed int32."""
    length = len(data)
    m = 0x5BD1E995
    r = 24
    h = (0x9747B28C ^ length) & _MASK32
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & _MASK32
        k ^= k >> r
        k = (k * m) & _MASK32
        h = (h * m) & _MASK32
        h ^= k
    tail = length % 4
    base = n4 * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which fails for MIN_VALUE)."""
    return n & 0x7FFFFFFF


def partition_hash_bytes(topic_id: KafkaUuid, partition: int) -> bytes:
    """The 4 bytes Kafka feeds to murmur2 for one user partition."""
    h = java_objects_hash_lli(topic_id.least_significant_bits, topic_id.most_significant_bits, partition)
    return (h & _MASK32).to_bytes(4, "big")


class RemoteLogMetadataTopicPartitioner:
    """Maps a user partition to its metadata partition, exactly as Kafka does."""

    __slots__ = ("num_metadata_partitions",)

    def __init__(self, num_metadata_partitions: int) -> None:
        if num_metadata_partitions <= 0:
            raise ValueError(f"num_metadata_partitions must be > 0, got {num_metadata_partitions}")
        self.num_metadata_partitions = num_metadata_partitions

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        h = murmur2(partition_hash_bytes(tp.topic_id, tp.partition))
        return to_positive(h) % self.num_metadata_partitions


def metadata_partition(tp: TopicIdPartition, num_metadata_partitions: int) -> int:
    """Shortcut for ``RemoteLogMetadataTopicPartitioner(n).metadata_partition(tp)``."""
    return RemoteLogMetadataTopicPartitioner(num_metadata_partitions).metadata_partition(tp)
