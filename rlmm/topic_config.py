"""Configuration of the topic-backed metadata manager, under Apache Kafka's own property names.

Operators already configure Kafka's ``TopicBasedRemoteLogMetadataManager`` with
``rlmm.config.remote.log.metadata.*`` broker properties; accepting the same names (with or
without the ``rlmm.config.`` prefix) lets one properties file drive both. Defaults and
validation follow ``TopicBasedRemoteLogMetadataManagerConfig`` (Kafka 4.1): partitions and
replication factor at least 1, retention -1 or > 0, wait/retry times >= 0, ``log.dir``
required. Our additions (not Kafka names) are marked as such below.

Client properties are split like Kafka does: ``remote.log.metadata.common.client.*`` goes to
admin, producer and consumer; ``remote.log.metadata.producer.*`` / ``.consumer.*`` override it
for one client. The forced settings (acks=all, idempotence, no auto commit, earliest reset,
client ids ``__remote_log_metadata_client_<broker.id>_producer|_consumer``) always win. The
clients are librdkafka (confluent-kafka), so Java-only serializer class names are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from rlm.errors import ConfigError
from rlm.secrets import hide_secrets, reveal_all

ClientConfig = dict[str, str | int | float | bool]
"""A librdkafka client configuration (what confluent-kafka's constructors take): secrets in clear."""
ClientProps = dict[str, str | SecretStr]
"""Client properties as configured: credential-like values (``sasl.password``, ...) stay hidden."""

DEFAULT_TOPIC = "__remote_log_metadata"
BROKER_PREFIX = "rlmm.config."
COMMON_CLIENT_PREFIX = "remote.log.metadata.common.client."
PRODUCER_PREFIX = "remote.log.metadata.producer."
CONSUMER_PREFIX = "remote.log.metadata.consumer."
CLIENT_ID_PREFIX = "__remote_log_metadata_client"

TOPIC_NAME = "remote.log.metadata.topic.name"  # our addition: Kafka hard-codes the name
NUM_PARTITIONS = "remote.log.metadata.topic.num.partitions"
REPLICATION_FACTOR = "remote.log.metadata.topic.replication.factor"
RETENTION_MS = "remote.log.metadata.topic.retention.ms"
CONSUME_WAIT_MS = "remote.log.metadata.consume.wait.ms"
INIT_RETRY_MAX_TIMEOUT_MS = "remote.log.metadata.initialization.retry.max.timeout.ms"
INIT_RETRY_INTERVAL_MS = "remote.log.metadata.initialization.retry.interval.ms"
SNAPSHOT_INTERVAL_MS = "remote.log.metadata.snapshot.interval.ms"  # our addition
CREATE_TOPIC = "remote.log.metadata.topic.create"  # our addition: false = never create it
BOOTSTRAP_SERVERS = "bootstrap.servers"  # shortcut for remote.log.metadata.common.client.bootstrap.servers
BROKER_ID = "broker.id"
LOG_DIR = "log.dir"

# Java client settings that have no librdkafka equivalent and would make it refuse the config.
_JAVA_ONLY = frozenset({
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
    "exclude.internal.topics",
})

_KNOWN = frozenset({TOPIC_NAME, NUM_PARTITIONS, REPLICATION_FACTOR, RETENTION_MS, CONSUME_WAIT_MS,
                    INIT_RETRY_MAX_TIMEOUT_MS, INIT_RETRY_INTERVAL_MS, SNAPSHOT_INTERVAL_MS, CREATE_TOPIC})


class TopicRlmmConfig(BaseModel):
    """Validated settings; build with :meth:`from_mapping` from Kafka-style properties."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    topic_name: str = Field(
        DEFAULT_TOPIC, alias="remote.log.metadata.topic.name", min_length=1, max_length=249)
    num_partitions: int = Field(50, alias="remote.log.metadata.topic.num.partitions", ge=1)
    # None = not set: the topic is created with min(3, number of brokers), as the issue asks.
    replication_factor: int | None = Field(
        None, alias="remote.log.metadata.topic.replication.factor", ge=1, le=32767)
    retention_ms: int = Field(-1, alias="remote.log.metadata.topic.retention.ms")
    # 10 s, not Kafka's 120 s: what rlm.yaml's metadata_request_timeout_ms gives it too, so there is
    # one default; a cold read loads its metadata partitions in well under a second, and a command
    # should fail fast, saying which partitions were late, when the cluster is not answering.
    consume_wait_ms: int = Field(10_000, alias="remote.log.metadata.consume.wait.ms", ge=0)
    init_retry_max_timeout_ms: int = Field(
        120_000, alias="remote.log.metadata.initialization.retry.max.timeout.ms", ge=0)
    init_retry_interval_ms: int = Field(
        100, alias="remote.log.metadata.initialization.retry.interval.ms", ge=0)
    snapshot_interval_ms: int = Field(60_000, alias="remote.log.metadata.snapshot.interval.ms", ge=0)
    create_topic: bool = Field(True, alias="remote.log.metadata.topic.create")
    broker_id: int = Field(alias="broker.id")
    log_dir: Path = Field(alias="log.dir")
    common_client: ClientProps = Field(default_factory=dict)
    producer_client: ClientProps = Field(default_factory=dict)
    consumer_client: ClientProps = Field(default_factory=dict)

    @field_validator("retention_ms")
    @classmethod
    def _retention(cls, v: int) -> int:
        if v != -1 and v <= 0:
            raise ValueError(f"Invalid metadata topic retention in millis: {v} (use -1 or a value > 0)")
        return v

    @field_validator("log_dir")
    @classmethod
    def _log_dir(cls, v: Path) -> Path:
        if not str(v):
            raise ValueError("log.dir config must not be null or empty")
        return v

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> TopicRlmmConfig:
        """Parse Kafka-style properties; unknown ``remote.log.metadata.*`` names are typos → error."""
        flat: dict[str, Any] = {}
        for key, value in config.items():
            k = key[len(BROKER_PREFIX):] if key.startswith(BROKER_PREFIX) else key
            flat[k] = value
        fields: dict[str, Any] = {}
        common: ClientProps = {}
        producer: ClientProps = {}
        consumer: ClientProps = {}
        for key, value in flat.items():
            if key.startswith(COMMON_CLIENT_PREFIX):
                common[key[len(COMMON_CLIENT_PREFIX):]] = _client_value(value)
            elif key.startswith(PRODUCER_PREFIX):
                producer[key[len(PRODUCER_PREFIX):]] = _client_value(value)
            elif key.startswith(CONSUMER_PREFIX):
                consumer[key[len(CONSUMER_PREFIX):]] = _client_value(value)
            elif key in _KNOWN or key in (BROKER_ID, LOG_DIR):
                fields[key] = value
            elif key == BOOTSTRAP_SERVERS:
                common.setdefault("bootstrap.servers", str(value))
            elif key.startswith("remote.log.metadata."):
                raise ConfigError(f"unknown metadata manager property {key!r}")
        if BROKER_ID not in fields:
            raise ConfigError(f"{BROKER_ID} is required")
        if LOG_DIR not in fields or fields[LOG_DIR] in (None, ""):
            raise ConfigError(f"{LOG_DIR} config must not be null or empty")
        if "bootstrap.servers" not in common:
            raise ConfigError(f"{COMMON_CLIENT_PREFIX}bootstrap.servers (or {BOOTSTRAP_SERVERS}) is required")
        try:
            return cls.model_validate({**fields, "common_client": hide_secrets(common),
                                       "producer_client": hide_secrets(producer),
                                       "consumer_client": hide_secrets(consumer)})
        except ValidationError as e:
            raise ConfigError(_explain(e)) from e

    # ---- derived client configurations ------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return str(self.common_client["bootstrap.servers"])

    @property
    def client_id_prefix(self) -> str:
        return f"{CLIENT_ID_PREFIX}_{self.broker_id}"

    def admin_config(self) -> ClientConfig:
        out = _clean(self.common_client)
        out["client.id"] = f"{self.client_id_prefix}_admin"
        return out

    def producer_config(self) -> ClientConfig:
        out = _clean({**self.common_client, **self.producer_client})
        out.update({"client.id": f"{self.client_id_prefix}_producer", "acks": "all",
                    "enable.idempotence": "true"})
        return out

    def consumer_config(self) -> ClientConfig:
        out = _clean({**self.common_client, **self.consumer_client})
        # No group: partitions are assign()ed, but librdkafka still wants a group.id string.
        out.setdefault("group.id", f"{self.client_id_prefix}_consumer")
        out.update({"client.id": f"{self.client_id_prefix}_consumer", "enable.auto.commit": "false",
                    "enable.auto.offset.store": "false", "auto.offset.reset": "earliest"})
        # A Fetch of partitions at their end is held this long by the broker, and a ListOffsets
        # (the end offset a new leader catches up to) queues behind it on the same connection;
        # new records still arrive at once (the broker answers a held Fetch when they are written).
        out.setdefault("fetch.wait.max.ms", "100")
        return out

    @property
    def snapshot_dir(self) -> Path:
        """Where the per-metadata-partition snapshots and ``_rlmm_committed_offsets`` live."""
        return self.log_dir


def _client_value(value: Any) -> str | SecretStr:
    if isinstance(value, SecretStr):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _clean(props: Mapping[str, str | SecretStr]) -> ClientConfig:
    """What librdkafka gets: Java-only names dropped, secrets revealed (only here)."""
    return {k: v for k, v in reveal_all(props).items() if k not in _JAVA_ONLY}


_ALIAS_BY_FIELD = {name: (f.alias or name) for name, f in TopicRlmmConfig.model_fields.items()}


def _explain(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        name = _ALIAS_BY_FIELD.get(loc, loc)
        parts.append(f"{name}: {err['msg']}")
    return "invalid metadata manager config: " + "; ".join(parts)
