"""The broker's own answers (ListOffsets) for what lies past the remote end.

Used by offset lookups when ``bootstrap_servers`` is configured, so one call covers remote and
local data, and by ``rlm replay`` to know the broker's local log start.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rlm.errors import MetadataUnavailableError

_TIMEOUT_S = 10.0


class BrokerOffsets:
    """A lazily created confluent-kafka consumer (no group use) asking ListOffsets."""

    def __init__(self, bootstrap_servers: str, client_config: Mapping[str, Any] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._client_config = {str(k): _plain(v) for k, v in (client_config or {}).items()}
        self._consumer: Any = None
        self._committed: Any = None
        self._lock = threading.Lock()

    def _client(self) -> Any:
        from confluent_kafka import Consumer

        with self._lock:
            if self._consumer is None:
                conf: dict[str, Any] = {**self._client_config, "bootstrap.servers": self.bootstrap_servers,
                                        "group.id": "rlm-fetcher-offsets", "enable.auto.commit": False}
                self._consumer = Consumer(conf)
            return self._consumer

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int, *,
                             timeout_s: float = _TIMEOUT_S) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) as the broker answers; ``None`` when no record is that
        late. -1 = latest (log end), -2 = earliest (the broker's local log start)."""
        from confluent_kafka import KafkaException, TopicPartition

        c = self._client()
        try:
            if timestamp in (-1, -2):
                low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
                return (high if timestamp == -1 else low), -1, -1
            got = c.offsets_for_times([TopicPartition(topic, partition, timestamp)], timeout=timeout_s)
        except KafkaException as e:
            raise MetadataUnavailableError(
                f"broker {self.bootstrap_servers}: ListOffsets for {topic}-{partition} failed: {e}") from e
        tp = got[0]
        if tp.error is not None:
            raise MetadataUnavailableError(f"broker ListOffsets for {topic}-{partition}: {tp.error}")
        if tp.offset < 0:
            return None
        epoch = getattr(tp, "leader_epoch", None)
        return tp.offset, -1, epoch if isinstance(epoch, int) and epoch >= 0 else -1

    @property
    def client_config(self) -> dict[str, Any]:
        """Client settings (secrets in clear) for other clients of the same cluster, e.g. an
        AdminClient resetting group offsets (``rlm replay``)."""
        return {**self._client_config, "bootstrap.servers": self.bootstrap_servers}

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions as the broker knows them (``[]`` for an unknown topic)."""
        from confluent_kafka import KafkaException

        try:
            md = self._client().list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        except KafkaException as e:
            raise MetadataUnavailableError(
                f"broker {self.bootstrap_servers}: metadata of {topic}: {e}") from e
        if md is None or md.error is not None:
            return []
        return sorted(int(p) for p in md.partitions)

    def local_log_start(self, topic: str, partition: int, *, timeout_s: float = _TIMEOUT_S) -> int:
        """The broker's earliest offset: below it only the remote tier has records (a broker that
        does not know about tiering; see :mod:`rlm.log.log_start` for when it bounds reads)."""
        got = self.offset_for_timestamp(topic, partition, -2, timeout_s=timeout_s)
        assert got is not None
        return got[0]

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's LSO as the broker answers ListOffsets(latest, read_committed)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        with self._lock:
            if self._committed is None:
                self._committed = Consumer({
                    **self._client_config, "bootstrap.servers": self.bootstrap_servers,
                    "group.id": "rlm-fetcher-offsets", "enable.auto.commit": False,
                    "isolation.level": "read_committed"})
            c = self._committed
        try:
            _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TIMEOUT_S)
        except KafkaException as e:
            raise MetadataUnavailableError(
                f"broker {self.bootstrap_servers}: ListOffsets (read_committed) for {topic}-{partition} "
                f"failed: {e}") from e
        return int(high)

    def close(self) -> None:
        with self._lock:
            for c in (self._consumer, self._committed):
                if c is not None:
                    c.close()
            self._consumer = self._committed = None


def _plain(value: Any) -> Any:
    """Secret values (pydantic ``SecretStr``) are passed in clear only to the client library."""
    get = getattr(value, "get_secret_value", None)
    return get() if callable(get) else value
