"""Publishes serialized metadata events the way Kafka's ``ProducerManager`` does.

``ProducerRecord(topic, partition=<metadata partition>, key=null, value=<serde bytes>)`` from an
idempotent producer with ``acks=all``: the key stays null and there are no headers, so a
broker's consumer sees exactly what its own producer would have written. ``publish`` blocks
until the broker acknowledged the record and returns its offset, so the caller can wait for
its own consumer to apply that offset.

Errors are typed and retriable: :class:`MetadataTimeoutError` when the outcome is unknown
(no acknowledgement in time; the idempotent producer may still deliver it),
:class:`MetadataUnavailableError` when the record was definitely not written. A fatal producer
error (idempotence state lost) replaces the producer instance.
"""

from __future__ import annotations

import logging
import threading
import time

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlm.errors import ConfigError, MetadataTimeoutError, MetadataUnavailableError
from rlmm.topic_config import ClientConfig, TopicRlmmConfig

log = structlog.get_logger(__name__)
_KAFKA_LOG = logging.getLogger("rlmm.kafka.producer")  # librdkafka's own log lines, not stderr


class _Delivery:
    __slots__ = ("done", "error", "offset")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: KafkaError | None = None
        self.offset = -1

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.error = err
        off = msg.offset()
        self.offset = off if off is not None else -1
        self.done.set()


class MetadataPublisher:
    """One producer shared by all writer threads, created when writing begins (:meth:`start`, or
    the first :meth:`publish`): a reader (``rlm fetch``, ``rlm offsets``) never writes, and a
    producer it does not use would cost it a broker connection, an idempotence handshake and
    the client's shutdown."""

    def __init__(self, cfg: TopicRlmmConfig) -> None:
        self._cfg = cfg
        self._conf: ClientConfig = cfg.producer_config()
        # Let librdkafka give up at about the time callers do, so a lost write surfaces as an error.
        self._conf.setdefault("message.timeout.ms", str(max(cfg.consume_wait_ms, 1000)))
        # Metadata events are rare and a writer waits for each one: do not hold them back.
        self._conf.setdefault("linger.ms", "0")
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._closed = False

    def start(self) -> None:
        """Create the producer now (a writer about to write: its idempotence handshake starts
        before the first event, and a bad producer setting fails here, not at the first write)."""
        self._current()

    def _current(self) -> Producer:
        with self._lock:
            if self._closed:
                raise MetadataUnavailableError("the metadata producer is closed")
            if self._producer is None:
                self._producer = self._new_producer()
            return self._producer

    def _new_producer(self) -> Producer:
        try:
            return Producer({**self._conf, "logger": _KAFKA_LOG})
        except KafkaException as e:
            raise ConfigError(f"invalid metadata producer configuration: {e}") from e

    def publish(self, partition: int, value: bytes, deadline: float) -> int:
        """Writes ``value`` (key null) to ``partition``; returns its offset once acknowledged."""
        d = _Delivery()
        producer = self._current()
        try:
            producer.produce(self._cfg.topic_name, value=value, key=None, partition=partition, on_delivery=d)
        except BufferError as e:
            raise MetadataUnavailableError(f"metadata producer queue is full: {e}") from e
        except KafkaException as e:
            raise MetadataUnavailableError(
                f"cannot produce to {self._cfg.topic_name}-{partition}: {e}") from e
        while not d.done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MetadataTimeoutError(
                    f"no acknowledgement from {self._cfg.topic_name}-{partition} within "
                    f"{self._cfg.consume_wait_ms} ms; the event may or may not have been written")
            producer.poll(min(remaining, 0.05))
        if d.error is not None:
            self._on_error(d.error, partition)
        return d.offset

    def _on_error(self, err: KafkaError, partition: int) -> None:
        where = f"{self._cfg.topic_name}-{partition}"
        if err.fatal():
            log.error("rlmm_producer_fatal", error=err.str())
            with self._lock:
                old, self._producer = self._producer, self._new_producer()
            if old is not None:
                old.flush(0)
            raise MetadataUnavailableError(
                f"metadata producer failed fatally writing to {where}: {err.str()}")
        if err.code() == KafkaError._MSG_TIMED_OUT:
            raise MetadataTimeoutError(f"writing to {where} timed out: {err.str()}")
        raise MetadataUnavailableError(f"writing to {where} failed: {err.str()}", retriable=err.retriable()
                                       or err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN))

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            producer, self._producer, self._closed = self._producer, None, True
            if producer is None:  # never wrote
                return
            remaining = producer.flush(timeout)
        if remaining:
            log.warning("rlmm_producer_unflushed", messages=remaining)
        # confluent-kafka frees the client only when the object goes; break our reference to it.
        del producer
