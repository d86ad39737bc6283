"""Configuration of the ``rlm run`` daemon: pydantic models, a YAML/TOML file and ``RLM_*`` env overrides.

Why one model tree: the same objects validate the file, the environment and the defaults, and
``scripts/gen_config_docs.py`` renders ``docs/configuration.md`` from them, so the documentation
cannot drift from the code. Kafka's own property names (``remote.log.manager.task.interval.ms``,
``rsm.config.*``, ``retention.ms``, ...) are accepted as aliases: each field that has a Kafka
name carries it in ``json_schema_extra["kafka"]`` and a before-validator renames those keys, so
env-var names stay ``RLM_<FIELD>`` (pydantic-settings ignores the env prefix for aliased fields).
Unknown keys are errors naming the key (``extra="forbid"``).
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rlm.config_errors import format_validation_error
from rlm.errors import ConfigError
from rlm.secrets import hide_secrets

LONG_MAX = 2**63 - 1

#: A free-form block (plugin config, client settings) whose credential-like values become SecretStr.
SecretAwareBlock = Annotated[dict[str, Any], AfterValidator(hide_secrets)]

#: librdkafka settings, validated as strings; the credential-like ones are then held as SecretStr
#: (so at run time a value is ``str | SecretStr``: reveal them with ``rlm.secrets.reveal_all``).
ClientSettings = Annotated[
    dict[str, str],
    AfterValidator(hide_secrets),
    PlainSerializer(lambda d: {k: str(v) for k, v in d.items()}, return_type=dict[str, str]),
]


def _kafka(name: str) -> dict[str, Any]:
    return {"kafka": name}


def _kafka_names(model: type[BaseModel]) -> dict[str, str]:
    """Kafka property name -> field name for one model."""
    out: dict[str, str] = {}
    for fname, f in model.model_fields.items():
        extra = f.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("kafka"), str):
            out[str(extra["kafka"])] = fname
    return out


def _rename_kafka_keys(model: type[BaseModel], data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    names = _kafka_names(model)
    out: dict[str, Any] = {}
    for k, v in data.items():
        target = names.get(k, k) if isinstance(k, str) else k
        if target in out and k != target:
            raise ValueError(f"{k!r} and {target!r} both set")
        out[target] = v
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _kafka_aliases(cls, data: Any) -> Any:
        return _rename_kafka_keys(cls, data)


class TopicSettings(_Strict):
    """Per-topic settings; Kafka topic-config names are accepted. ``None`` = inherit."""

    remote_storage_enable: bool | None = Field(
        None,
        json_schema_extra=_kafka("remote.storage.enable"),
        description="Tier this topic. The sidecar's own switch: a cluster without native tiered "
        "storage rejects this as a topic config.",
    )
    retention_ms: int | None = Field(
        None,
        ge=-1,
        json_schema_extra=_kafka("retention.ms"),
        description="Total (remote) retention by time; -1 = forever.",
    )
    retention_bytes: int | None = Field(
        None,
        ge=-1,
        json_schema_extra=_kafka("retention.bytes"),
        description="Total (remote + local) retention by size; -1 = unlimited.",
    )
    local_retention_ms: int | None = Field(
        None,
        ge=-2,
        json_schema_extra=_kafka("local.retention.ms"),
        description="The broker's local retention by time (-2 = retention.ms); used to warn when copy lag "
        "approaches it.",
    )
    local_retention_bytes: int | None = Field(
        None,
        ge=-2,
        json_schema_extra=_kafka("local.retention.bytes"),
        description="The broker's local retention by size (-2 = retention.bytes).",
    )
    cleanup_policy: str | None = Field(
        None,
        json_schema_extra=_kafka("cleanup.policy"),
        description="Overrides what the broker reports. 'compact' topics are tiered below the "
        "broker cleaner's checkpoint and never expired by retention; 'compact,delete' as delete "
        "topics (docs/compacted-topics.md).",
    )


class TopicOverride(TopicSettings):
    """Settings for topics whose name matches ``pattern`` (shell glob, e.g. ``orders-*``)."""

    pattern: str = Field(
        description="Topic-name glob (fnmatch). Later matching entries win over earlier ones."
    )


class ResolvedTopicConfig(BaseModel):
    """The effective settings for one topic after defaults and every matching override."""

    model_config = ConfigDict(frozen=True)

    remote_storage_enable: bool
    retention_ms: int
    retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int
    cleanup_policy: str | None
    #: the broker's topic configs remote compaction honours (rlm.compaction.settings.KAFKA_NAMES)
    compaction_configs: tuple[tuple[str, str], ...] = ()


class StorageConfig(_Strict):
    """The RemoteStorageManager plugin (``rsm_plugins``)."""

    plugin: str = Field(
        "local",
        json_schema_extra=_kafka("remote.log.storage.manager.class.name"),
        description="Built-in name (local, s3, fsspec, aiven), entry-point name or 'module:Class' "
        "(Kafka's LocalTieredStorage and Aiven's io.aiven.kafka.tieredstorage.RemoteStorageManager "
        "class names are accepted; aiven is read-only).",
    )
    config: SecretAwareBlock = Field(
        default_factory=dict,
        description="Plugin configuration; Kafka-style 'rsm.config.<key>' top-level keys land here. "
        "For 'local' the default root is '<work_dir>/remote'. Credential-like keys are kept secret.",
    )


class MetadataConfig(_Strict):
    """The RemoteLogMetadataManager (``rlmm``)."""

    manager: str = Field(
        "file",
        json_schema_extra=_kafka("remote.log.metadata.manager.class.name"),
        description="'file' (embedded, default), 'topic' (__remote_log_metadata) or 'module:Class'.",
    )
    config: SecretAwareBlock = Field(
        default_factory=dict,
        description="Manager configuration; top-level 'rlmm.config.<key>' (prefix stripped) and "
        "'remote.log.metadata.<key>' (kept whole) land here. For 'file' the default dir is "
        "'<work_dir>/metadata'. Credential-like keys (e.g. '...sasl.password') are kept secret.",
    )


class HttpConfig(_Strict):
    """Prometheus ``/metrics`` and ``/health``."""

    enabled: bool = Field(True, description="Serve /metrics and /health.")
    host: str = Field("127.0.0.1", description="Bind address; loopback by default.")
    port: int = Field(
        9464, ge=0, le=65535, description="Port; 0 picks a free one (written to the status file)."
    )


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _all_mechanisms() -> list[SaslMechanism]:
    return ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class LocalUser(_Strict):
    """A user of the standalone mode: SCRAM credentials (Kafka's text), never a password."""

    name: str
    scram_sha_256: SecretStr | None = Field(
        None, description="salt=...,stored_key=...,server_key=...,iterations=N (Kafka's format)."
    )
    scram_sha_512: SecretStr | None = Field(None, description="As scram_sha_256, for SCRAM-SHA-512.")


class LocalAllow(_Strict):
    """What one principal may read in standalone mode (shell patterns)."""

    principal: str = Field(description="e.g. User:alice")
    topics: list[str] = Field(default_factory=list, description="topics it may DESCRIBE and READ")
    groups: list[str] = Field(default_factory=list, description="consumer groups it may use")


class BearerTokenHash(_Strict):
    """An HTTP bearer token, given by its SHA-256 only, and the principal it authenticates."""

    principal: str = Field(description="e.g. User:reports (a bare name means User:<name>)")
    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="SHA-256 of the token, hex (`printf %s \"$TOKEN\" | sha256sum`); never the token itself.",
    )


class ListenerSecurity(_Strict):
    """TLS and SASL of the Kafka-protocol endpoint, with Kafka's listener property names.

    Who may read what is decided by the cluster (``bootstrap_servers``): SASL credentials are
    relayed to a broker and authorization follows the broker's ACLs for that principal (see
    docs/security.md), so there is no user database or ACL list here to keep in sync.
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", json_schema_extra=_kafka("security.protocol"),
        description="Protocol of the endpoint's listener, as in Kafka's listener.security.protocol.map.",
    )
    sasl_enabled_mechanisms: list[SaslMechanism] = Field(
        default_factory=_all_mechanisms,
        json_schema_extra=_kafka("sasl.enabled.mechanisms"),
        description="SASL mechanisms offered (the broker must enable them too: each login is relayed to it).",
    )
    ssl_keystore_location: Path | None = Field(
        None, json_schema_extra=_kafka("ssl.keystore.location"),
        description="PEM file with the server certificate chain and its private key (ssl.keystore.type PEM).",
    )
    ssl_keystore_type: Literal["PEM"] = Field(
        "PEM", json_schema_extra=_kafka("ssl.keystore.type"), description="Only PEM is read.",
    )
    ssl_key_location: Path | None = Field(
        None, description="The private key in a file of its own (default: in ssl.keystore.location).",
    )
    ssl_key_password: SecretStr | None = Field(
        None, json_schema_extra=_kafka("ssl.key.password"),
        description="Password of an encrypted private key (kept secret: never logged or shown).",
    )
    ssl_truststore_location: Path | None = Field(
        None, json_schema_extra=_kafka("ssl.truststore.location"),
        description="PEM file of the CAs client certificates must chain to (mTLS).",
    )
    ssl_client_auth: Literal["required", "requested", "none"] = Field(
        "none", json_schema_extra=_kafka("ssl.client.auth"),
        description="Client certificates: required (mTLS), requested (verified when sent), none.",
    )
    ssl_reload_interval_ms: int = Field(
        10_000, ge=0,
        description="How often the certificate files are checked for a change and reloaded without a "
        "restart (0 = only on SIGHUP).",
    )
    authz_cache_ms: int = Field(
        5_000, ge=0,
        description="How long the broker's answer on what a principal may describe/read is reused; an ACL "
        "revoked on the broker takes effect within this time (0 = ask on every request).",
    )

    connections_max_reauth_ms: int = Field(
        0, ge=0, json_schema_extra=_kafka("connections.max.reauth.ms"),
        description="Kafka endpoint with SASL: session lifetime announced to clients (KIP-368, "
        "SaslAuthenticate v1+); a client re-authenticates before it ends, a connection past it without "
        "re-authentication is closed at its next request. 0 = the broker's lifetime only (relay) or none. "
        "With a relayed login the shorter of this and the broker's applies.",
    )
    users: list[LocalUser] = Field(
        default_factory=list,
        description="Standalone mode only (no broker to relay logins to): users with SCRAM credentials "
        "(`fetcher.kafka.local_auth.scram_credential` makes them); PLAIN is checked against them too.",
    )
    allow: list[LocalAllow] = Field(
        default_factory=list,
        description="Standalone mode only: per-principal topic and group allow rules (everything else "
        "is denied).",
    )
    bearer_tokens: list[BearerTokenHash] = Field(
        default_factory=list,
        description="HTTP API only: bearer tokens (by SHA-256) mapped to principals; their topics follow the "
        "broker's ACLs for that principal (read with kafka_client's login, which needs DESCRIBE on the "
        "cluster) or, standalone, the allow rules.",
    )
    bearer_tokens_file: Path | None = Field(
        None,
        description="HTTP API only: a file of '<sha256-hex> <principal>' lines ('#' comments), added to "
        "bearer_tokens; read at startup.",
    )
    connections_per_principal: int = Field(
        0, ge=0,
        description="Kafka endpoint with SASL: open connections one principal may have (0 = no limit); "
        "one more is closed after its login, as Kafka's max.connections.per.ip closes.",
    )
    read_bytes_per_second_per_principal: int = Field(
        0, ge=0,
        description="Kafka endpoint with SASL: record bytes per second one principal may fetch (0 = no "
        "limit); beyond it Fetch answers carry throttle_time_ms and the connection's next Fetch waits "
        "that long (KIP-219), so one reader cannot starve the others.",
    )
    login_failures_per_address: int = Field(
        10, ge=0,
        description="Kafka endpoint and HTTP API: failed logins from one client address within "
        "login_failure_window_ms after which its further logins are refused at once, without asking the "
        "broker or hashing a password (0 = no limit). See fetcher/cluster_auth/login_limits.py.",
    )
    login_failures_per_user: int = Field(
        20, ge=0,
        description="Kafka endpoint and HTTP API: failed logins as one user name (from any address) "
        "within login_failure_window_ms after which logins as it are refused at once (0 = no limit); a "
        "successful login clears the count.",
    )
    login_failure_window_ms: int = Field(
        60_000, ge=0,
        description="Kafka endpoint and HTTP API: the sliding window of the failed-login limits (0 = off).",
    )

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @model_validator(mode="after")
    def _keystore_for_tls(self) -> ListenerSecurity:
        if self.tls and self.ssl_keystore_location is None:
            raise ValueError(f"security.protocol {self.security_protocol} needs ssl.keystore.location")
        if self.ssl_client_auth != "none" and self.ssl_truststore_location is None:
            raise ValueError(f"ssl.client.auth={self.ssl_client_auth} needs ssl.truststore.location")
        return self


class ReadConfig(_Strict):
    """The read side (``fetcher``): reader pool, remote read sizing, and ``rlm serve``'s HTTP API.

    Kafka's names are accepted at top level (``remote.log.reader.threads`` ...) as for the daemon.
    """

    reader_threads: int = Field(
        10, ge=1, json_schema_extra=_kafka("remote.log.reader.threads"),
        description="Threads of the remote reader pool.",
    )
    reader_max_pending_tasks: int = Field(
        100, ge=1, json_schema_extra=_kafka("remote.log.reader.max.pending.tasks"),
        description="Queued reads beyond the running ones; a full queue answers 'busy' (retriable).",
    )
    fetch_max_wait_ms: int = Field(
        500, ge=1, json_schema_extra=_kafka("remote.fetch.max.wait.ms"),
        description="Default timeout of one remote read (a caller may pass a longer one).",
    )
    fetch_max_bytes_per_second: int = Field(
        LONG_MAX, gt=0, json_schema_extra=_kafka("remote.log.manager.fetch.max.bytes.per.second"),
        description="Quota on bytes read from remote storage per second, over all readers.",
    )
    offsets_timeout_ms: int = Field(
        30000, ge=1,
        description="Default timeout of a remote offset-by-timestamp lookup (it may read a time index and "
        "scan batches of a cold segment, so it gets longer than one fetch).",
    )
    chunk_bytes: int = Field(
        8 * 1024 * 1024, ge=4096,
        description="Size of one ranged GET and of one chunk-cache entry; larger reads are split into "
        "chunks fetched in parallel.",
    )
    chunk_cache_bytes: int = Field(
        128 * 1024 * 1024, ge=0,
        description="Bytes of remote segment data kept in memory (LRU) for sequential readers.",
    )
    read_ahead_chunks: int = Field(
        2, ge=0, description="Chunks prefetched after a sequential read, continuing into the next segment.",
    )
    parallel_gets: int = Field(
        10, ge=1, description="Ranged GETs in flight at once for this reader, all reads together (boto3's "
        "TransferManager keeps 10: an object store hides its per-request latency behind parallel requests).",
    )
    read_ahead_bytes: int = Field(
        128 * 1024 * 1024, ge=0,
        description="Receive buffers one scan (Arrow, the HTTP API's stream, a Spark task) holds ahead of "
        "its decoder: up to this many bytes of chunks are fetched in parallel (at most `parallel_gets` at "
        "once), as many as the store's answer time needs to keep the decoder busy; 0: no read-ahead. "
        "Keep it above `parallel_gets * chunk_bytes` (80 MiB) plus the chunks being decoded, or a lone "
        "scan cannot use every GET.",
    )
    log_start_refresh_ms: int = Field(
        5000, ge=0,
        description="How long a reader keeps a partition's log start (the published object, the log dir's "
        "log-start-offset-checkpoint, the broker's earliest offset) before asking again; records below it "
        "(DeleteRecords) are never served.",
    )
    serve_http: bool = Field(
        False, description="`rlm run` also serves the read HTTP API (as `rlm serve` does) on "
        "http_host:http_port.",
    )
    http_host: str = Field("127.0.0.1", description="`rlm serve`: bind address of the HTTP API.")
    http_port: int = Field(9465, ge=0, le=65535, description="`rlm serve`: port of the HTTP API (0 = any).")
    http_token_env: str | None = Field(
        None, description="Name of an environment variable holding a bearer token the HTTP API requires.",
    )
    http_token_file: Path | None = Field(
        None, description="File holding a bearer token the HTTP API requires (first line).",
    )
    http_security: ListenerSecurity = Field(
        default_factory=ListenerSecurity,  # type: ignore[arg-type]
        description="HTTP API: TLS (SSL, SASL_SSL) and, with SASL_*, HTTP Basic credentials checked by "
        "logging in to the cluster plus per-topic authorization by its ACLs (docs/security.md).",
    )
    allow_plaintext: bool = Field(
        False, description="`rlm serve` / `rlm kafka-serve` / `rlm check`: allow a read face bound beyond "
        "loopback with neither TLS nor authentication (as `--allow-plaintext` does); only when another "
        "boundary (a private network, a mesh with mTLS) protects it.",
    )
    kafka_host: str = Field("127.0.0.1", description="Kafka-protocol endpoint: bind address.")
    kafka_port: int = Field(9466, ge=0, le=65535, description="Kafka-protocol endpoint: port (0 = any).")
    kafka_advertised_host: str | None = Field(
        None, description="Kafka-protocol endpoint: host named in Metadata (default: the bind address).",
    )
    kafka_node_id: int = Field(0, ge=0, description="Kafka-protocol endpoint: the broker id it answers as.")
    kafka_max_connections: int = Field(
        256, ge=1, description="Kafka-protocol endpoint: open connections; more are closed at once.",
    )
    kafka_max_request_bytes: int = Field(
        100 * 1024 * 1024, ge=1024,
        description="Kafka-protocol endpoint: largest request; a bigger size prefix closes the connection.",
    )
    kafka_max_in_flight: int = Field(
        8, ge=1, description="Kafka-protocol endpoint: requests of one connection handled at once "
        "(responses stay in request order; further requests wait unread).",
    )
    kafka_merged: bool = Field(
        True, description="Kafka-protocol endpoint: with `bootstrap_servers` set, forward fetches at or "
        "above the broker's local log start to the partition's leader (one address serves the whole log).",
    )
    kafka_idle_timeout_ms: int = Field(
        600_000, ge=100,
        description="Kafka-protocol endpoint: a connection idle this long, or a request or response "
        "stalled this long, is closed.",
    )
    kafka_sasl_max_receive_size: int = Field(
        524_288, ge=1024, json_schema_extra=_kafka("sasl.server.max.receive.size"),
        description="Kafka-protocol endpoint: largest request before a connection has logged in (with "
        "SASL; the broker's setting, same default); a bigger size prefix closes the connection.",
    )
    kafka_login_timeout_ms: int = Field(
        10_000, ge=100,
        description="Kafka-protocol endpoint: a connection must complete its SASL login (without SASL: "
        "send its first request) within this time, or it is closed.",
    )
    kafka_max_connections_per_ip: int = Field(
        128, ge=0, json_schema_extra=_kafka("max.connections.per.ip"),
        description="Kafka-protocol endpoint: open connections from one client address; more are closed "
        "at once (0 = no limit).",
    )
    kafka_max_unauthenticated_connections: int = Field(
        128, ge=1,
        description="Kafka-protocol endpoint: connections not logged in yet (counted within "
        "kafka_max_connections, so the rest stay for logged-in clients); when full, a new one takes the "
        "place of the oldest of the address holding the most if its own address would still hold "
        "fewer, else of the oldest one if it has waited half kafka_login_timeout_ms, else it is "
        "refused before TLS, so a flood of idle sockets can neither keep a client out nor churn.",
    )
    kafka_connection_creation_rate_per_ip: float = Field(
        50.0, ge=0,
        description="Kafka-protocol endpoint: new connections per second from one client address (a "
        "burst of ten seconds' worth passes; Kafka's KIP-612 per-IP connection creation rate quota); "
        "more are refused on accept, before any TLS work, and closed after the time the rate needs to "
        "allow one again (at most a second). 0 = no limit.",
    )
    kafka_queued_max_request_bytes: int = Field(
        128 * 1024 * 1024, ge=1024, json_schema_extra=_kafka("queued.max.request.bytes"),
        description="Kafka-protocol endpoint: request bytes read and held, over all connections, before "
        "their handlers finish; a request that would exceed it is not read (its connection waits, as "
        "a broker's memory pool mutes channels) until others finish.",
    )
    kafka_fetch_max_bytes: int = Field(
        57_671_680, ge=1024, json_schema_extra=_kafka("fetch.max.bytes"),
        description="Kafka-protocol endpoint: a Fetch's max_bytes is capped at this (the broker's "
        "fetch.max.bytes, 55 MiB); the first batch is still returned whole.",
    )
    kafka_max_partition_fetch_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, json_schema_extra=_kafka("max.partition.fetch.bytes"),
        description="Kafka-protocol endpoint: a Fetch's partition_max_bytes is capped at this, so one "
        "request cannot read a whole segment from remote storage; the first batch is still returned whole.",
    )
    kafka_fetch_session_cache_slots: int = Field(
        1000, ge=0, json_schema_extra=_kafka("max.incremental.fetch.session.cache.slots"),
        description="Kafka-protocol endpoint: incremental fetch sessions (KIP-227) kept at once, over all "
        "connections (the broker's setting, same default); when full, a new session takes the slot of "
        "one idle longer than kafka_fetch_session_eviction_ms, or of an older one with fewer partitions, "
        "else the client fetches without a session. 0: no sessions.",
    )
    kafka_fetch_session_eviction_ms: int = Field(
        120_000, ge=0, json_schema_extra=_kafka("min.incremental.fetch.session.eviction.ms"),
        description="Kafka-protocol endpoint: a fetch session idle this long may be evicted for a new "
        "one, and one younger than this is never evicted for a bigger one (the broker's setting, same "
        "default).",
    )
    kafka_event_loop: Literal["auto", "asyncio", "uvloop"] = Field(
        "auto",
        description="Kafka-protocol endpoint: the event loop that frames, encrypts and sends responses. "
        "`uvloop` (libuv; its TLS transport is compiled) when installed (the `kafka` extra installs it), "
        "else the standard library's; `auto` picks uvloop when it can be imported.",
    )
    allocator_mmap_threshold_bytes: int = Field(
        64 * 1024 * 1024, ge=0, le=2**31 - 1,
        description="`rlm kafka-serve` / `rlm serve`: glibc's mmap threshold. Buffers below it (chunks, "
        "a Fetch's records) come from the heap and are reused once freed, instead of being mapped "
        "and page-faulted in anew each time; keep it above `chunk_bytes` and the largest partition "
        "answer. 0: the C library's default.",
    )
    allocator_trim_threshold_bytes: int = Field(
        512 * 1024 * 1024, ge=0, le=2**31 - 1,
        description="`rlm kafka-serve` / `rlm serve`: glibc's trim threshold, the free heap kept for "
        "reuse before it is returned to the system (the process may hold this much more than it "
        "uses). 0: the C library's default.",
    )
    kafka_sequential_reads: bool = Field(
        True,
        description="Kafka-protocol endpoint: Fetch reads go through the chunk cache with read-ahead "
        "(`chunk_bytes`, `read_ahead_chunks`, `parallel_gets`), since consumers read forward; off: each "
        "Fetch GETs exactly its own range (for readers that mostly seek).",
    )
    kafka_group_initial_rebalance_delay_ms: int = Field(
        3000, ge=0, le=300_000, json_schema_extra=_kafka("group.initial.rebalance.delay.ms"),
        description="Kafka-protocol endpoint: how long a new (empty) consumer group waits for more "
        "members before its first rebalance completes (the broker's setting, same default).",
    )
    kafka_consumer_session_timeout_ms: int = Field(
        45_000, ge=1_000, le=3_600_000, json_schema_extra=_kafka("group.consumer.session.timeout.ms"),
        description="Kafka-protocol endpoint, consumer groups of the KIP-848 protocol "
        "(`group.protocol=consumer`): a member that sends no heartbeat for this long is removed and "
        "its partitions go to the others (the broker's setting, same default).",
    )
    kafka_consumer_heartbeat_interval_ms: int = Field(
        5_000, ge=100, le=600_000, json_schema_extra=_kafka("group.consumer.heartbeat.interval.ms"),
        description="Kafka-protocol endpoint, KIP-848 consumer groups: the heartbeat interval the "
        "coordinator asks members for (the broker's setting, same default); new assignments reach "
        "members at their next heartbeat.",
    )
    kafka_group_max_size: int = Field(
        1000, ge=1, le=1_000_000, json_schema_extra=_kafka("group.max.size"),
        description="Kafka-protocol endpoint: members of one consumer group (classic or KIP-848), "
        "counting the member ids handed out by JoinGroup and not yet used; more get "
        "GROUP_MAX_SIZE_REACHED (Kafka's classic default is unbounded: a bound keeps a flood finite).",
    )
    kafka_offsets_retention_minutes: int = Field(
        10080, ge=1, json_schema_extra=_kafka("offsets.retention.minutes"),
        description="Kafka-protocol endpoint: committed offsets of a group without members are "
        "removed this long after both their commit and the group becoming empty (the broker's "
        "setting, same default: 7 days); a group with members keeps its offsets.",
    )
    kafka_offsets_retention_check_interval_ms: int = Field(
        600_000, ge=10, json_schema_extra=_kafka("offsets.retention.check.interval.ms"),
        description="Kafka-protocol endpoint: how often expired offsets are looked for (the broker's "
        "setting, same default).",
    )
    kafka_offset_metadata_max_bytes: int = Field(
        4096, ge=0, json_schema_extra=_kafka("offset.metadata.max.bytes"),
        description="Kafka-protocol endpoint: the longest metadata string an OffsetCommit may carry; "
        "a longer one is refused with OFFSET_METADATA_TOO_LARGE (the broker's setting, same default).",
    )
    kafka_peers: list[str] = Field(
        default_factory=list,
        description="Kafka-protocol endpoint: the advertised host:port of every endpoint process "
        "serving the same remote tier behind one address (e.g. the pods of a StatefulSet), the same "
        "list in the same order in each; `kafka_node_id` is this process's index in it. Each consumer "
        "group is coordinated by one of them (by a hash of its id), as a broker cluster does. Empty: "
        "this process coordinates every group.",
    )
    kafka_security: ListenerSecurity = Field(
        default_factory=ListenerSecurity,  # type: ignore[arg-type]
        description="Kafka-protocol endpoint: TLS, SASL and authorization by the cluster's ACLs "
        "(docs/security.md).",
    )


_PREFIX_TARGETS = (
    ("rsm.config.", "storage"),
    ("rlmm.config.", "metadata"),
    ("remote.log.metadata.", "metadata"),
)
_KEEP_PREFIX = frozenset({"remote.log.metadata."})
_PLUGIN_KEYS = {
    "remote.log.storage.manager.class.name": ("storage", "plugin"),
    "remote.log.metadata.manager.class.name": ("metadata", "manager"),
}


class DecodedField(_Strict):
    """One column decoded from record values: a JSON member, an Avro record field or a Protobuf
    message field."""

    name: str = Field(min_length=1, description="Field name in the value (and the column's name).")
    type: Literal["boolean", "int", "long", "float", "double", "string", "binary", "date",
                  "timestamp", "timestamptz", "struct", "list", "map"] = Field(
        description="Iceberg type: boolean, int, long, float, double, string, binary, date, timestamp, "
        "timestamptz, struct (give `fields`), list (give `element`) or map (give `key` and `value`; "
        "only from a Protobuf schema).")
    required: bool = Field(False, description="A record without it (or with null) is a dead letter.")
    fields: list[DecodedField] | None = Field(None, description="`struct`: its fields.")
    element: DecodedField | None = Field(None, description="`list`: its element (`name` is ignored).")
    key: DecodedField | None = Field(None, description="`map`: its key (`name` is ignored).")
    value: DecodedField | None = Field(None, description="`map`: its value (`name` is ignored).")

    @model_validator(mode="after")
    def _nested(self) -> DecodedField:
        if (self.type == "struct") != (self.fields is not None):
            raise ValueError(f"field {self.name!r}: `fields` goes with type struct, and only with it")
        if (self.type == "list") != (self.element is not None):
            raise ValueError(f"field {self.name!r}: `element` goes with type list, and only with it")
        if (self.type == "map") != (self.key is not None and self.value is not None) or (
                self.type != "map" and (self.key is not None or self.value is not None)):
            raise ValueError(f"field {self.name!r}: `key` and `value` go with type map, and only with it")
        return self

    def has_map(self) -> bool:
        kids = [*(self.fields or []), *(c for c in (self.element, self.key, self.value) if c is not None)]
        return self.type == "map" or any(c.has_map() for c in kids)


class SchemaRegistryConfig(_Strict):
    """A Confluent-compatible Schema Registry (Confluent, Apicurio's ``/apis/ccompat/v7``, Karapace)."""

    url: str = Field(min_length=1,
                     description="Base URL; writer schemas are read from `GET {url}/schemas/ids/{id}`.")
    timeout_s: float = Field(10.0, gt=0, description="Timeout of one registry request.")
    username: str | None = Field(None, description="HTTP basic auth user, if the registry needs one.")
    password: SecretStr | None = Field(None, description="HTTP basic auth password.")


class ValueDecodeConfig(_Strict):
    """``rlm iceberg``: decode record values into typed columns; what does not decode goes to the
    dead-letter table ``<table>_dead_letter`` with the reason."""

    format: Literal["json", "avro", "json_schema", "protobuf"] = Field(
        description="`json`: one JSON object per value; `avro`: Confluent wire format (magic byte 0, "
        "4-byte big-endian schema id, Avro binary) with the writer schema from `schema_registry`; "
        "`json_schema`: Confluent wire format with JSON text, the schema id naming a JSON Schema "
        "in `schema_registry`; `protobuf`: Confluent wire format with the message-index list and "
        "Protobuf binary, the schema id naming a Protobuf schema in `schema_registry`.")
    fields: list[DecodedField] = Field(
        default_factory=list,
        description="The decoded columns, added after the Kafka columns. `json_schema` may leave it "
        "empty and give `subject`: the columns then come from that subject's latest JSON Schema. "
        "`protobuf` leaves it empty: its columns come from `subject`'s message.")
    schema_registry: SchemaRegistryConfig | None = Field(
        None, description="`avro`, `json_schema`, `protobuf`: the registry.")
    subject: str | None = Field(
        None, min_length=1,
        description="`json_schema` without `fields`, and `protobuf`: the registry subject (e.g. "
        "`orders-value`) whose latest schema gives the columns (read when the writer starts).")
    message: str | None = Field(
        None, min_length=1,
        description="`protobuf`: the full name of the message whose fields are the columns (e.g. "
        "`shop.Order`); default: the first message of the subject's latest schema (the one "
        "Confluent's serializer frames as message index [0]).")
    keep_value: bool = Field(
        True, description="Keep the raw `value` bytes of decoded rows (false: null there; the "
        "dead-letter table always keeps them).")
    dead_letter_suffix: str = Field(
        "_dead_letter", min_length=1, description="Dead-letter table name: the table's name plus this.")

    @model_validator(mode="after")
    def _registry_for_avro(self) -> ValueDecodeConfig:
        if self.format in ("avro", "json_schema", "protobuf") and self.schema_registry is None:
            raise ValueError(f"decode: format {self.format} needs schema_registry")
        if self.format == "protobuf":
            if self.subject is None or self.fields:
                raise ValueError("decode: format protobuf takes its columns from `subject` (give it, "
                                 "and no `fields`)")
            return self
        if self.message is not None:
            raise ValueError("decode: `message` goes with format protobuf")
        if any(f.has_map() for f in self.fields):
            raise ValueError("decode: type map comes only from a Protobuf schema")
        if not self.fields and (self.format != "json_schema" or self.subject is None):
            raise ValueError("decode: list the `fields` (or, for format json_schema, give `subject`)")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("decode: a field name is listed twice")
        return self


class IcebergDaemonConfig(_Strict):
    """``rlm run`` keeps these topics' Iceberg tables in step (docs/iceberg.md): after the copy
    pass of ``--once``, and every ``interval_ms`` in a running daemon, the same writer as
    ``rlm iceberg`` appends the segments the tables do not hold yet (same ledger, so it can take
    turns with ``rlm iceberg`` runs on the same table). Off while ``topics`` is empty.
    """

    topics: list[str] = Field(
        default_factory=list,
        description="Tiered topics whose tables `rlm run` keeps in step: names or globs (fnmatch, as "
        "`topics[].pattern`); `[]` = off.",
    )
    interval_ms: int = Field(30_000, gt=0, description="Running daemon: pause between two passes.")

    def selects(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, p) for p in self.topics)


class IcebergSharedTable(_Strict):
    """One Iceberg table for several tiered topics (docs/iceberg.md, "Several topics in one
    table"): every topic the names or globs select goes to table ``name`` instead of a table of
    its own. The table gets an identity partition on ``topic`` (before ``partition_by``), each
    snapshot says which topic it added, and the ledger of segment ids is kept per (topic,
    partition), so the topics' writers take turns on the table without ever confusing their
    segments. A topic selected by several entries goes to the first.
    """

    name: str = Field(
        min_length=1, pattern=r"^[^{}]+$",
        description="The table's name in `iceberg.namespace` (dots become underscores).",
    )
    topics: list[str] = Field(
        min_length=1,
        description="Tiered topics written to this table: names or globs (fnmatch, as `topics[].pattern`).",
    )

    def selects(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, p) for p in self.topics)


class IcebergConfig(_Strict):
    """``rlm iceberg``: the Apache Iceberg table kept per tiered topic (docs/iceberg.md).

    The table is a derived copy: the remote tier stays the source of truth, and each snapshot
    records the remote segment ids it added, which is what makes a rerun or a crash safe.
    """

    catalog_name: str = Field("rlm", min_length=1, description="The PyIceberg catalog's name.")
    catalog: SecretAwareBlock = Field(
        default_factory=dict,
        description="PyIceberg catalog properties (`type`, `uri`, `warehouse`, `s3.endpoint`, ...), as "
        "`pyiceberg.catalog.load_catalog` takes them. Empty = the embedded default: a SQL catalog on "
        "SQLite at `<work_dir>/iceberg/catalog.db`, warehouse `<work_dir>/iceberg/warehouse`.",
    )
    daemon: IcebergDaemonConfig = Field(
        default_factory=IcebergDaemonConfig,  # type: ignore[arg-type]
        description="`rlm run` keeps tables in step too (see `iceberg.daemon`).",
    )
    namespace: str = Field("kafka", min_length=1, description="The tables' namespace.")
    table_name: str = Field(
        "{topic}", min_length=1,
        description="Table name template; `{topic}` is the topic (dots become underscores).",
    )
    shared_tables: list[IcebergSharedTable] = Field(
        default_factory=list,
        description="Tables shared by several topics: entries of `name` and `topics` (names or globs); "
        "the first entry selecting a topic wins. A topic no entry selects gets a table of its own "
        "(`table_name`). `[]` (default) = one table per topic.",
    )
    partition_by: list[Literal["day", "hour", "partition", "topic"]] = Field(
        default_factory=lambda: ["day"],  # type: ignore[arg-type]
        description="Partition spec of a new table: `day` or `hour` of the record timestamp, and/or "
        "`partition` (identity on the Kafka partition), `topic` (identity on the topic; a shared "
        "table always has it, first unless listed here); `[]` = unpartitioned.",
    )
    isolation: Literal["read_committed", "read_uncommitted"] = Field(
        "read_committed", description="Default isolation: read_committed leaves aborted records out.",
    )
    segments_per_commit: int = Field(
        4, ge=1, description="Remote segments appended in one Iceberg snapshot (at most).",
    )
    target_file_size_bytes: int = Field(
        128 * 1024 * 1024, gt=0,
        description="`write.target-file-size-bytes` of a new table (PyIceberg counts Arrow bytes).",
    )
    spark_segments_per_job: int = Field(
        64, ge=1,
        description="`--engine spark`: remote segments whose data files one Spark job writes (whole commit "
        "groups); a pass with more runs several. Keep a job well within `orphan_min_age_ms`: its files wait "
        "for the job's end before their commits.",
    )
    poll_interval_ms: int = Field(5000, gt=0, description="`--follow`: pause between two passes.")
    commit_retries: int = Field(
        20, ge=0, description="Commit conflicts (another writer committed first) retried before giving up.",
    )
    decode: ValueDecodeConfig | None = Field(
        None, description="Decode values into typed columns (JSON, or Avro, JSON Schema or Protobuf through "
        "a Schema Registry); records that do not decode go to a dead-letter table. Off by default. Keys: "
        "`format`, `fields`, `schema_registry`, `subject`, `message`, `keep_value`, `dead_letter_suffix` "
        "(docs/iceberg.md, \"Decoding values\").",
    )
    expire_deleted_segments: bool = Field(
        False,
        description="Delete from the table the rows below each partition's log start (segments deleted by "
        "remote retention, records deleted by `DeleteRecords`), recorded in the snapshot (`rlm.expired`). "
        "Off: history tables usually outlive Kafka's retention.",
    )
    compact_min_files: int = Field(
        2, ge=2, description="`rlm iceberg compact`: small files a closed partition needs to be rewritten.",
    )
    orphan_min_age_ms: int = Field(
        3_600_000, ge=0,
        description="`rlm iceberg compact` deletes data files no snapshot references once they are this old "
        "(a younger one may belong to a writer about to commit).",
    )

    @model_validator(mode="after")
    def _one_time_transform(self) -> IcebergConfig:
        if "day" in self.partition_by and "hour" in self.partition_by:
            raise ValueError("partition_by: choose one of day and hour")
        if len(set(self.partition_by)) != len(self.partition_by):
            raise ValueError("partition_by: a transform is listed twice")
        names = [t.name for t in self.shared_tables]
        if len(set(names)) != len(names):
            raise ValueError("shared_tables: a table name is listed twice")
        return self

    def shared_table(self, topic: str) -> IcebergSharedTable | None:
        """The shared table ``topic`` goes to (the first entry selecting it), or ``None``: a table
        of its own."""
        return next((t for t in self.shared_tables if t.selects(topic)), None)

    def table_partition_by(self, topic: str) -> list[str]:
        """The partition spec of ``topic``'s table when it is created: a shared table has an
        identity partition on ``topic`` (first, unless ``partition_by`` places it)."""
        by: list[str] = list(self.partition_by)
        if self.shared_table(topic) is not None and "topic" not in by:
            by.insert(0, "topic")
        return by


class DaemonConfig(BaseSettings):
    """Top-level configuration of ``rlm run``. Env: ``RLM_<FIELD>``, nested with ``__``."""

    model_config = SettingsConfigDict(
        env_prefix="RLM_", env_nested_delimiter="__", extra="forbid", frozen=True, case_sensitive=False
    )

    log_dirs: list[Path] = Field(
        default_factory=list,
        description="The broker's log dirs (read only: the daemon never writes there). Required by "
        "`rlm run`; the read side (`rlm serve`, `rlm fetch`, Spark) needs only storage and metadata.",
    )
    work_dir: Path = Field(
        Path("rlm-work"),
        description="The daemon's own directory: status file, staging, default local storage and metadata.",
    )
    bootstrap_servers: str | None = Field(
        None,
        description="Kafka bootstrap servers. Unset = standalone: every partition in the log dirs is "
        "managed and the LSO is computed from the log.",
    )
    node_id: int | None = Field(
        None, description="This broker's node id; default: read from meta.properties."
    )
    kafka_client: ClientSettings = Field(
        default_factory=dict,
        description="Extra librdkafka settings (security.protocol, sasl.*, ssl.*, ...) for every "
        "connection to the cluster at bootstrap_servers: leadership and LSO admin client, preflight, "
        "broker offsets of the read side, the Kafka endpoint's merged mode, and the topic metadata "
        "store unless it has a bootstrap of its own. Credential-like keys (sasl.password, "
        "ssl.key.password, ...) are kept secret: never logged or shown.",
    )
    storage: StorageConfig = Field(default_factory=StorageConfig)  # type: ignore[arg-type]
    metadata: MetadataConfig = Field(default_factory=MetadataConfig)  # type: ignore[arg-type]
    http: HttpConfig = Field(default_factory=HttpConfig)  # type: ignore[arg-type]
    read: ReadConfig = Field(default_factory=ReadConfig)  # type: ignore[arg-type]
    iceberg: IcebergConfig = Field(default_factory=IcebergConfig)  # type: ignore[arg-type]
    task_interval_ms: int = Field(
        30000,
        gt=0,
        json_schema_extra=_kafka("remote.log.manager.task.interval.ms"),
        description="A partition's next run is at now + this.",
    )
    thread_pool_size: int = Field(
        10,
        gt=0,
        json_schema_extra=_kafka("remote.log.manager.thread.pool.size"),
        description="Worker threads; one partition per thread at a time.",
    )
    retry_backoff_ms: int = Field(
        500,
        gt=0,
        json_schema_extra=_kafka("remote.log.manager.task.retry.backoff.ms"),
        description="First backoff after a failed run.",
    )
    retry_backoff_max_ms: int = Field(
        30000,
        gt=0,
        json_schema_extra=_kafka("remote.log.manager.task.retry.backoff.max.ms"),
        description="Backoff cap.",
    )
    retry_jitter: float = Field(
        0.2,
        ge=0,
        le=1,
        json_schema_extra=_kafka("remote.log.manager.task.retry.jitter"),
        description="Backoff is multiplied by a random factor in [1-jitter, 1+jitter].",
    )
    copy_max_bytes_per_second: int = Field(
        LONG_MAX,
        gt=0,
        json_schema_extra=_kafka("remote.log.manager.copy.max.bytes.per.second"),
        description="Copy quota (token bucket over all partitions).",
    )
    index_file_cache_total_size_bytes: int = Field(
        1 << 30,
        gt=0,
        json_schema_extra=_kafka("remote.log.index.file.cache.total.size.bytes"),
        description="Remote index cache size (used by readers sharing this config).",
    )
    custom_metadata_max_bytes: int = Field(
        128,
        ge=0,
        json_schema_extra=_kafka("remote.log.metadata.custom.metadata.max.bytes"),
        description="Largest custom metadata a plugin may return; bigger → the copy is undone and the "
        "partition's copying stops.",
    )
    remote_compaction_memory_bytes: int = Field(
        256 * 1024 * 1024,
        ge=64 * 1024,
        description="Memory cap of remote compaction's key maps (each job's offset map and newer-keys "
        "set), shared by every partition compacting at once on the task threads: a job gets what it "
        "wants (128 MiB + 64 MiB) if that leaves cap / (4 * thread_pool_size) for each other thread, "
        "else what is left above those (a smaller offset map, more passes); the reservations never "
        "exceed it. See docs/remote-compaction-job.md.",
    )
    partition_remover_interval_ms: int = Field(
        3600000,
        gt=0,
        json_schema_extra=_kafka("remote.partition.remover.task.interval.ms"),
        description="How often deleted partitions' remote data is removed.",
    )
    leadership_refresh_interval_ms: int = Field(10000, gt=0, description="Cluster metadata refresh interval.")
    rescan_interval_ms: int = Field(
        30000, gt=0, description="Log-dir rescan interval for new/removed partitions."
    )
    stale_copy_grace_ms: int = Field(
        600000,
        ge=0,
        description="A COPY_SEGMENT_STARTED written by another node is treated as abandoned "
        "after this long (its age is read from the wall clock when first seen, then advanced by "
        "the monotonic clock, so a clock jump cannot change it); this node's own are cleaned up "
        "at once.",
    )
    off_lineage_grace_ms: int = Field(
        7 * 24 * 3600 * 1000,
        ge=0,
        description="A FINISHED remote segment off the current leader-epoch lineage (and needed by "
        "no read) is quarantined: kept, shown in `rlm status` and `rlm verify` and counted in "
        "rlm_remote_segments_quarantined, and deleted only if it is still off the lineage after "
        "this long (the first-seen time is kept in the work dir across restarts).",
    )
    copy_lag_warn_ratio: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Warn when the oldest uncopied segment's age exceeds this fraction "
        "of local.retention.ms.",
    )
    shutdown_timeout_s: float = Field(30.0, gt=0, description="SIGTERM: how long running copies may finish.")
    storage_request_timeout_ms: int = Field(
        10000,
        gt=0,
        description="Per-request timeout of storage calls: the health check and the start-up "
        "preflight give up after this, and the s3 plugin's connect/read timeouts default to it.",
    )
    metadata_request_timeout_ms: int = Field(
        10000,
        gt=0,
        description="Per-request timeout of metadata and cluster calls (admin requests, metadata "
        "futures, the health check, the preflight; the topic store's "
        "remote.log.metadata.consume.wait.ms defaults to it).",
    )
    health_check_interval_ms: int = Field(
        5000,
        gt=0,
        description="How often storage and metadata are checked for /health, /ready and `rlm status` "
        "(also the status file's heartbeat).",
    )
    log_format: Literal["json", "console"] = Field("json", description="structlog renderer.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    topic_defaults: TopicSettings = Field(
        default_factory=TopicSettings,  # type: ignore[arg-type]
        description="Defaults for every topic; Kafka topic-config names also accepted at top level.",
    )
    topics: list[TopicOverride] = Field(
        default_factory=list, description="Per-topic overrides by name pattern."
    )
    _source: str = PrivateAttr("configuration")

    @property
    def source(self) -> str:
        """Where this configuration came from (the file name), for error messages."""
        return self._source

    @model_validator(mode="before")
    @classmethod
    def _kafka_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = _rename_kafka_keys(cls, data)
        topic_names = _kafka_names(TopicSettings)
        read_names = _kafka_names(ReadConfig)
        out: dict[str, Any] = {}
        special: list[tuple[str, Any]] = []
        for k, v in data.items():
            if isinstance(k, str) and (
                k in topic_names or k.startswith(tuple(p for p, _ in _PREFIX_TARGETS)) or k in _PLUGIN_KEYS
                or k in read_names
            ):
                special.append((k, v))
            else:
                out[k] = v

        def block(name: str) -> dict[str, Any]:
            current = out.get(name)
            merged = dict(current) if isinstance(current, dict) else {}
            out[name] = merged
            return merged

        for k, v in special:
            if k in _PLUGIN_KEYS:
                section, fname = _PLUGIN_KEYS[k]
                block(section)[fname] = v
            elif k in topic_names:
                block("topic_defaults")[topic_names[k]] = v
            elif k in read_names:
                block("read")[read_names[k]] = v
            else:
                prefix, target = next((p, t) for p, t in _PREFIX_TARGETS if k.startswith(p))
                plugin_block = block(target)
                inner = dict(plugin_block.get("config") or {})
                inner[k if prefix in _KEEP_PREFIX else k[len(prefix) :]] = v
                plugin_block["config"] = inner
        return out

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest first: explicit keyword arguments, ``RLM_*`` variables, the file (:func:`load_config`)."""
        return init_settings, env_settings, _FileSource(settings_cls)

    # ---- derived --------------------------------------------------------------------------
    def topic_config(self, topic: str) -> ResolvedTopicConfig:
        """Defaults, then every override whose pattern matches ``topic`` in order (later wins)."""
        eff: dict[str, Any] = {
            "remote_storage_enable": False,
            "retention_ms": 7 * 24 * 3600 * 1000,
            "retention_bytes": -1,
            "local_retention_ms": -2,
            "local_retention_bytes": -2,
            "cleanup_policy": None,
        }
        layers: list[TopicSettings] = [self.topic_defaults]
        layers += [o for o in self.topics if fnmatch.fnmatchcase(topic, o.pattern)]
        for layer in layers:
            for name in TopicSettings.model_fields:
                value = getattr(layer, name)
                if value is not None:
                    eff[name] = value
        if eff["local_retention_ms"] == -2:
            eff["local_retention_ms"] = eff["retention_ms"]
        if eff["local_retention_bytes"] == -2:
            eff["local_retention_bytes"] = eff["retention_bytes"]
        return ResolvedTopicConfig(**eff)

    def has_topic_setting(self, topic: str, field: str) -> bool:
        """True when the sidecar's own config sets ``field`` for ``topic`` (defaults or an override)."""
        layers: list[TopicSettings] = [self.topic_defaults]
        layers += [o for o in self.topics if fnmatch.fnmatchcase(topic, o.pattern)]
        return any(getattr(layer, field) is not None for layer in layers)


def _moved_keys(data: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(section, field) -> the top-level key the user wrote that ``_kafka_aliases`` moved there."""
    moved: dict[tuple[str, str], str] = {}
    for k in data:
        if not isinstance(k, str):
            continue
        if k in _PLUGIN_KEYS:
            moved[_PLUGIN_KEYS[k]] = k
        elif k in _kafka_names(TopicSettings):
            moved[("topic_defaults", _kafka_names(TopicSettings)[k])] = k
        elif k in _kafka_names(ReadConfig):
            moved[("read", _kafka_names(ReadConfig)[k])] = k
    return moved


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file into a dict; errors name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot parse configuration: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: configuration must be a mapping at top level")
    return data


_FILE_VALUES: ContextVar[dict[str, Any] | None] = ContextVar("rlm_config_file_values", default=None)


class _FileSource(PydanticBaseSettingsSource):
    """The configuration file's values, ranked below the environment; set only by :func:`load_config`."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get() or {})


def load_config(path: Path | None = None, **overrides: Any) -> DaemonConfig:
    """Build the configuration. Precedence, highest first (one order, also in docs/configuration.md):

    1. ``overrides`` (what the caller passes explicitly, e.g. a command-line option);
    2. ``RLM_*`` environment variables;
    3. the file at ``path`` (optional);
    4. the defaults of the models.

    Nested blocks merge key by key (``RLM_STORAGE__CONFIG__FSYNC`` changes one key of the file's
    ``storage.config``). Kafka property names are renamed to field names first, so a file's
    ``remote.log.manager.task.interval.ms`` is overridden by ``RLM_TASK_INTERVAL_MS``. Every
    problem becomes a :class:`ConfigError` naming the offending key.
    """
    source = str(path) if path is not None else "configuration"
    raw: dict[str, Any] = read_config_file(path) if path is not None else {}
    data = {**raw, **overrides}  # what the user wrote, for error messages in their words
    try:
        # Kafka names become field names per source, so that each ranks as the field it names
        aliases: Callable[[Any], dict[str, Any]] = DaemonConfig._kafka_aliases  # type: ignore[assignment]
        token = _FILE_VALUES.set(aliases(raw))
        try:
            config = DaemonConfig(**aliases(dict(overrides)))
        finally:
            _FILE_VALUES.reset(token)
        config._source = source
        return config
    except ValidationError as e:
        top = [*_kafka_names(TopicSettings), *_kafka_names(ReadConfig), *_PLUGIN_KEYS,
               *(p for p, _ in _PREFIX_TARGETS)]
        msg = format_validation_error(
            e, DaemonConfig, data, source, moved=_moved_keys(data), top_keys=top, env=os.environ
        )
        raise ConfigError(msg) from e
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from e


def env_keys() -> list[str]:
    """The ``RLM_*`` variables present in the environment (for diagnostics)."""
    return sorted(k for k in os.environ if k.upper().startswith("RLM_"))
