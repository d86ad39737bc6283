"""Cheap checks of the daemon's dependencies, each bounded by a timeout.

Why: a storage or metadata call that hangs (a paused S3 server accepts connections and never
answers) must not hide an outage until the plugin's own retries give up minutes later. The
health monitor runs these every few seconds and the start-up preflight runs them once; both
need the same answer to "is it reachable?", so the checks live here.

The storage checks use only the RemoteStorageManager contract, so they work for every plugin:
reading a segment that cannot exist must end in ``RemoteResourceNotFoundError`` (anything else
means the store is not usable), and the write check copies and deletes a tiny synthetic segment
under a topic name no broker can have (``__rlm_probe``, a fixed topic id, a fresh segment id).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm.errors import (
    DependencyUnavailableError,
    KafkaAuthenticationError,
    PreflightError,
    ProbeTimeoutError,
    RemoteResourceNotFoundError,
)
from rlm.types import (
    KafkaUuid,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

PROBE_TOPIC = "__rlm_probe"
# Fixed, so repeated probes reuse one (empty) topic directory/prefix instead of leaving one per start.
PROBE_TOPIC_ID = KafkaUuid(b"rlm-probe-topic\n")


class BoundedCall:
    """Runs a callable in its own named thread and waits at most ``timeout_s`` for it.

    A call that does not return is left running (Python threads cannot be cancelled) and no
    second call is started while it hangs, so a dead dependency costs one thread, not one per
    probe.
    """

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def __call__(self, fn: Callable[[], Any]) -> Any:
        if self._thread is not None and self._thread.is_alive():
            raise ProbeTimeoutError(
                f"no answer for {time.monotonic() - self._started:.0f}s (timeout {self.timeout_s:g}s)"
            )
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:
                box["error"] = e

        self._started = time.monotonic()
        self._thread = threading.Thread(target=target, name=self.name, daemon=True)
        self._thread.start()
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():
            raise ProbeTimeoutError(f"no answer within {self.timeout_s:g}s")
        if "error" in box:
            raise box["error"]
        return box.get("value")


def _probe_metadata(size: int) -> RemoteLogSegmentMetadata:
    tp = TopicIdPartition(PROBE_TOPIC_ID, PROBE_TOPIC, 0)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(tp),
        start_offset=0,
        end_offset=0,
        max_timestamp_ms=int(time.time() * 1000),
        broker_id=-1,
        event_timestamp_ms=int(time.time() * 1000),
        segment_size_in_bytes=size,
        segment_leader_epochs=((0, 0),),
        txn_index_empty=True,
    )


def storage_read_check(rsm: Any) -> None:
    """Read a segment that cannot exist; only ``RemoteResourceNotFoundError`` means "reachable"."""
    md = _probe_metadata(1)
    try:
        stream = rsm.fetch_log_segment(md, 0)
    except RemoteResourceNotFoundError:
        return
    with stream:  # a plugin may fail lazily, on the first read
        stream.read(1)


def storage_write_check(rsm: Any) -> str:
    """Copy a tiny synthetic segment and delete it again; returns where it went (for ``rlm check``)."""
    payload = b"rlm preflight probe\n"
    md = _probe_metadata(len(payload))
    with tempfile.TemporaryDirectory(prefix="rlm-probe-") as tmp:
        d = Path(tmp)
        files = {}
        for suffix in (".log", ".index", ".timeindex", ".snapshot"):
            f = d / f"{0:020d}{suffix}"
            f.write_bytes(payload if suffix == ".log" else b"")
            files[suffix] = f
        data = LogSegmentData(
            log_segment=files[".log"],
            offset_index=files[".index"],
            time_index=files[".timeindex"],
            transaction_index=None,
            producer_snapshot_index=files[".snapshot"],
            leader_epoch_index=b"0\n1\n0 0\n",
        )
        try:
            rsm.copy_log_segment_data(md, data)
        finally:
            rsm.delete_log_segment_data(md)
    return f"{PROBE_TOPIC}-{PROBE_TOPIC_ID.text}, segment {md.remote_log_segment_id.id.text}"


def listen_check(host: str, port: int) -> str:
    """Bind ``host:port`` and let it go again, as the daemon's HTTP server will bind it (with
    ``SO_REUSEADDR``, like :mod:`http.server`); raises ``OSError`` (EADDRINUSE, ...) when it cannot."""
    import socket

    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    return f"{host}:{port} can be bound"


def kafka_logger(name: str) -> Any:
    """A stdlib logger for librdkafka's own lines (``logger=`` config); :mod:`rlm.logging_setup`
    routes the ``rlm.kafka`` tree through structlog, rate-limited."""
    import logging

    return logging.getLogger(f"rlm.kafka.{name}")


class LoginFailures:
    """librdkafka's ``error_cb``: remembers the last refused login (SASL or TLS handshake).

    A refused login shows up in a request only as "broker transport failure" or a timeout; the
    reason comes through this callback, so the checks can say *authentication failed* instead of
    *no broker answered*. librdkafka's texts name the mechanism, never the password.
    """

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        codes = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
        if err.code() in codes:
            self.last = str(err.str())

    def raise_if_refused(self, what: str) -> None:
        """Raise :class:`KafkaAuthenticationError` when a login was refused."""
        if self.last is not None:
            raise KafkaAuthenticationError(
                f"{what} refused the login ({self.last}); check the security.protocol, sasl.* and "
                "ssl.* client settings"
            )


def admin_client(conf: dict[str, Any], name: str, failures: LoginFailures | None = None) -> Any:
    """An AdminClient whose log lines go to structlog and, with ``failures``, whose refused logins
    are remembered there."""
    from confluent_kafka.admin import AdminClient

    extra: dict[str, Any] = {"logger": kafka_logger(name)}
    if failures is not None:
        extra["error_cb"] = failures
    return AdminClient({**conf, **extra})


def broker_check(admin: Any, timeout_s: float, failures: LoginFailures | None = None) -> int:
    """Number of brokers in the cluster's metadata; raises when no broker answers in time
    (:class:`KafkaAuthenticationError` when one answered but refused the login)."""
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        admin.poll(0)  # runs the error callback
        if failures is not None:
            failures.raise_if_refused("the broker")
        raise DependencyUnavailableError(f"no broker answered within {timeout_s:g}s ({e.args[0]})") from e
    finally:
        admin.poll(0)  # hands librdkafka's queued log lines to the logger
    return len(md.brokers)


def metadata_topic_online_check(admin: Any, topic: str, timeout_s: float) -> None:
    """Every partition of the metadata topic has a leader; raises naming the ones that do not.

    Why: the cluster answering (:func:`broker_check`) is not enough. When the only replica of a
    metadata partition is on a stopped broker, the cluster answers but no metadata can be read
    or written, so no copy can start: the daemon must say it is not ready.
    """
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as e:
        raise DependencyUnavailableError(f"no broker answered within {timeout_s:g}s ({e.args[0]})") from e
    finally:
        admin.poll(0)
    t = md.topics.get(topic)
    if t is None or (t.error is not None and not t.partitions):
        raise DependencyUnavailableError(f"metadata topic {topic!r} unavailable: {getattr(t, 'error', None)}")
    offline = sorted(int(pid) for pid, p in t.partitions.items() if p.leader < 0)
    if offline:
        raise DependencyUnavailableError(
            f"metadata topic {topic!r}: partition(s) {offline} have no leader (their replicas are offline)"
        )


def metadata_topic_check(
    admin: Any, tcfg: Any, timeout_s: float, failures: LoginFailures | None = None
) -> str:
    """``present (...)`` or ``absent, creatable (...)``; raises what would stop ``rlm run``.

    ``tcfg`` is the metadata store's :class:`rlmm.topic_config.TopicRlmmConfig`. An absent topic
    is tried with a validate-only CreateTopics of exactly the request the daemon sends
    (:func:`rlmm.topic_admin.new_metadata_topic`: partitions, replication factor, configs), so a
    replication factor the live brokers cannot reach fails here, not at ``rlm run``; with
    ``remote.log.metadata.topic.create`` false an absent topic fails. A present topic must have
    the configured partition count and must not be compacted (the metadata events have no keys);
    other configs that differ from what the daemon would set are named in the detail.

    Sidecars started together race to create the topic (issue 20): when another one created it
    between our listing and our validate-only create, the create answers TOPIC_ALREADY_EXISTS,
    and that is success (only the partition count is checked). A topic listed without leaders
    may be one being created this instant: it is listed again until ``timeout_s``, and fails
    as before (dependency unavailable) only if it still has no leader then.
    """
    from confluent_kafka import KafkaError, KafkaException

    from rlmm.topic_admin import broker_knows_remote_storage, new_metadata_topic

    topic, partitions = tcfg.topic_name, tcfg.num_partitions
    leaderless = (KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION)

    def present(count: int, how: str = "", replicas: int = 0, brokers: int = 0) -> str:
        if count and count != partitions:
            raise PreflightError(
                f"topic {topic!r} has {count} partitions, configured {partitions} "
                "(remote.log.metadata.topic.num.partitions must match the existing topic)")
        notes = [] if not count else _existing_topic_notes(admin, tcfg, timeout_s)
        if replicas > brokers > 0:
            notes.append(f"replication factor {replicas} but only {brokers} live broker(s): under-replicated")
        extra = f"; {'; '.join(notes)}" if notes else ""
        return (f"present ({count} partitions{how}){extra}" if count else f"present ({how.lstrip(', ')})")

    try:
        deadline = time.monotonic() + timeout_s
        while True:
            md = admin.list_topics(topic=topic, timeout=timeout_s)
            t = md.topics.get(topic)
            if t is None or t.error is None or t.error.code() not in leaderless:
                break
            if time.monotonic() >= deadline:
                raise KafkaException(t.error)
            time.sleep(0.2)
        brokers = len(md.brokers)
        if t is not None and t.error is None:
            replicas = max((len(p.replicas) for p in t.partitions.values()), default=0)
            return present(len(t.partitions), replicas=replicas, brokers=brokers)
        if t is not None and t.error is not None and t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(t.error)
        if not tcfg.create_topic:
            raise PreflightError(
                f"topic {topic!r} does not exist and remote.log.metadata.topic.create is false: "
                "check the bootstrap servers and the topic name")
        known = broker_knows_remote_storage(admin, timeout_s)
        new = new_metadata_topic(tcfg, brokers, remote_storage_known=known)
        fut = admin.create_topics([new], request_timeout=timeout_s, validate_only=True)[topic]
        try:
            fut.result(timeout=timeout_s + 1)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                raise PreflightError(
                    f"topic {topic!r} cannot be created with replication factor {new.replication_factor}: "
                    f"{brokers} live broker(s); set remote.log.metadata.topic.replication.factor to at most "
                    f"{brokers} (or leave it unset: min(3, live brokers)) or start more brokers") from e
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            # another sidecar created it since our listing: check what it created, if listed yet
            t = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
            listed = t is not None and (t.error is None or t.error.code() in leaderless)
            count = len(t.partitions) if listed and t is not None else 0
            return present(count, ", just created by another client")
        configs = ", ".join(f"{k}={v}" for k, v in sorted((new.config or {}).items()))
        return (f"absent, creatable ({partitions} partitions, replication factor {new.replication_factor} "
                f"of {brokers} live broker(s), {configs})")
    except KafkaException as e:
        admin.poll(0)
        if failures is not None:
            failures.raise_if_refused(f"metadata topic {topic!r}")
        raise DependencyUnavailableError(f"metadata topic {topic!r}: {e.args[0]}") from e
    finally:
        admin.poll(0)


def _existing_topic_notes(admin: Any, tcfg: Any, timeout_s: float) -> list[str]:
    """How the existing topic's configs differ from what the daemon would create; a compacted
    topic raises (the daemon's keyless metadata events would be refused by the broker)."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    from rlmm.topic_admin import topic_configs

    res = ConfigResource(ResourceType.TOPIC, tcfg.topic_name)
    try:
        entries = admin.describe_configs([res], request_timeout=timeout_s)[res].result(timeout=timeout_s + 1)
    except Exception as e:  # DescribeConfigs denied or unsupported: say so, it does not stop the daemon
        return [f"configs not checked ({e})"]
    actual = {name: entry.value for name, entry in entries.items()}
    if "compact" in str(actual.get("cleanup.policy", "")):
        raise PreflightError(
            f"topic {tcfg.topic_name!r} has cleanup.policy={actual['cleanup.policy']}: the metadata "
            "events have no keys, so the broker refuses them; set cleanup.policy=delete on the topic")
    differ = [f"{k}={actual.get(k)} (the daemon would create {v})"
              for k, v in sorted(topic_configs(tcfg).items()) if k in actual and actual.get(k) != v]
    return [f"configs differ: {', '.join(differ)}"] if differ else []
