"""One SASL_SSL broker with KRaft's StandardAuthorizer for the whole security suite (session scope).

Its only client listener is SASL_SSL (PEM keystore, PLAIN + SCRAM-SHA-512); ``admin`` is the
super user (the daemon and the endpoint's own connections log in as it); ACLs:

- alice: READ on topic A, READ on groups prefixed ``alice-``
- bob:   READ on topics A and B, READ on every group
- carol: READ on topic A and on every group (a test revokes it)

Topics A and B (1 MiB segments) are tiered by one daemon pass (file-free: topic metadata store
over SASL_SSL, local storage), then the broker deletes the tiered range (DeleteRecords), so
everything the endpoint serves below ``remote_end`` can only come from remote storage.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.partition import PartitionDir
from rlm.logging_setup import configure_logging
from tests.daemon.helpers import SEGMENT_BYTES, produce, wait_for
from tests.security.certs import Ca, issue, make_ca
from tests.services.kafka import KafkaCluster, KafkaNode, SaslScram

PASSWORDS = {
    "admin": "admin-pw-4b1e77",
    "alice": "alice-pw-93c2d0",
    "bob": "bob-pw-1f6a5e",
    "carol": "carol-pw-c70b18",
}
WRONG_PASSWORD = "wrong-pw-55e0a9"
SECRETS = (*PASSWORDS.values(), WRONG_PASSWORD)
AUTHZ_CACHE_MS = 1500
RECORDS = 4500  # ~2 rolled 1 MiB segments per topic at 300-byte values


class SaslSslCluster(KafkaCluster):
    """:class:`KafkaCluster` whose client listener is SASL_SSL with ACLs (properties appended)."""

    ca: Ca | None = None
    keystore: Path | None = None

    def _properties(self, n: KafkaNode) -> str:
        assert self.ca is not None and self.keystore is not None
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
        scram = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{PASSWORDS["admin"]}";'
        )
        plain = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{PASSWORDS["admin"]}" {plain_users};'
        )
        extra = {
            "listeners": f"SASL_SSL://127.0.0.1:{n.broker_port},CONTROLLER://127.0.0.1:{n.controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{n.broker_port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.path),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the PLAINTEXT controller listener
            "allow.everyone.if.no.acl.found": "false",
        }
        return super()._properties(n) + "".join(f"{k}={v}\n" for k, v in extra.items())

    @property
    def client_config(self) -> dict[str, str]:
        return client_conf("admin", self)


def client_conf(
    user: str, kafka: SaslSslCluster, mechanism: str = "SCRAM-SHA-512", password: str | None = None
) -> dict[str, str]:
    assert kafka.ca is not None
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
        "ssl.ca.location": str(kafka.ca.path),
    }


@pytest.fixture(autouse=True)
def _no_secret_in_output(capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Every line the test process (endpoint, HTTP API, read core, librdkafka) printed during a
    security test is free of passwords."""
    yield
    out, err = capfd.readouterr()
    for secret in SECRETS:
        assert secret not in out and secret not in err, f"a password appeared in the output: {secret[:3]}…"


def rebind_logging() -> None:
    """The daemon configured structlog to print to the ``sys.stderr`` of the moment, a capture
    file pytest closes after the test: later log lines (from the endpoint's thread) would fail.
    Bind it to the process's real stderr (still captured at the file-descriptor level)."""
    with contextlib.redirect_stderr(sys.__stderr__):
        configure_logging("console", "info")


@dataclass
class Secured:
    kafka: SaslSslCluster
    ca: Ca
    topics: dict[str, str]  # "A"/"B" -> topic name
    remote_end: dict[str, int]
    before: dict[str, list[tuple[int, bytes, bytes]]]  # what the broker served before deletion
    fetcher: RemoteFetcher
    endpoint: EndpointThread
    tmp: Path
    keystore: Path  # the endpoint's certificate (key + chain)

    @property
    def bootstrap(self) -> str:
        return self.endpoint.bootstrap

    def client(
        self, user: str, mechanism: str = "SCRAM-SHA-512", password: str | None = None
    ) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, **client_conf(user, self.kafka, mechanism, password)}


def _acl(principal: str, rtype: ResourceType, name: str, pattern: ResourcePatternType) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", AclOperation.READ, AclPermissionType.ALLOW)


def acls(topics: dict[str, str]) -> list[AclBinding]:
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    return [
        _acl("User:alice", ResourceType.TOPIC, topics["A"], lit),
        _acl("User:alice", ResourceType.GROUP, "alice-", pre),
        _acl("User:bob", ResourceType.TOPIC, topics["A"], lit),
        _acl("User:bob", ResourceType.TOPIC, topics["B"], lit),
        _acl("User:bob", ResourceType.GROUP, "*", lit),
        _acl("User:carol", ResourceType.TOPIC, topics["A"], lit),
        _acl("User:carol", ResourceType.GROUP, "*", lit),
    ]


def read_range(conf: dict[str, Any], topic: str, end: int) -> list[tuple[int, bytes, bytes]]:
    """Records [0, end) of partition 0, read with confluent-kafka (``conf`` has the login)."""
    c = Consumer({**conf, "group.id": f"bob-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    got: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        import time

        give_up = time.monotonic() + 90  # only so a broken endpoint fails instead of hanging
        while (not got or got[-1][0] < end - 1) and time.monotonic() < give_up:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise AssertionError(f"consumer error: {m.error()}")
            if m.offset() < end:
                got.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return got


def login_error(conf: dict[str, Any], timeout_s: float = 30.0) -> KafkaError:
    """The first error librdkafka reports for a client with ``conf`` (its error callback), e.g. a
    refused login: reported as soon as the server refuses, where a ``list_topics`` call would
    wait out its whole timeout."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "retries": 0, "error_cb": errors.append})
    give_up = time.monotonic() + timeout_s  # only so a broken endpoint fails instead of hanging
    while not errors and time.monotonic() < give_up:
        admin.poll(0.1)
    assert errors, "no error reported"
    return errors[0]


def _tier_config(kafka: SaslSslCluster, topics: list[str], tmp: Path, work: str, **read: Any) -> Any:
    return load_config(
        None,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(tmp / work),
        bootstrap_servers=kafka.bootstrap,
        kafka_client=client_conf("admin", kafka),
        storage={"plugin": "local", "config": {"root": str(tmp / "remote"), "fsync": False}},
        metadata={
            "manager": "topic",
            "config": {
                "log.dir": str(tmp / work / "rlmm"),
                "remote.log.metadata.topic.num.partitions": 1,
                "remote.log.metadata.topic.replication.factor": 1,
                "remote.log.metadata.consume.wait.ms": 30000,
            },
        },
        topics=[{"pattern": t, "remote.storage.enable": True} for t in topics],
        http={"enabled": False},
        read={"kafka_merged": False, **read},
    )


@contextlib.contextmanager
def own_endpoint(
    secured: Secured,
    name: str,
    security: dict[str, Any] | None = None,
    settings: ListenerSettings | None = None,
) -> Iterator[Secured]:
    """A read core and Kafka endpoint of a test module's own on the shared broker (SASL_SSL with
    the suite's certificate, then ``security`` on top), so the module's limits, floods and failed
    logins leave the suite's shared endpoint alone. Yields ``secured`` with them in place."""
    cfg = _tier_config(
        secured.kafka,
        list(secured.topics.values()),
        secured.tmp,
        f"reader-{name}",
        kafka_security={
            "security.protocol": "SASL_SSL",
            "ssl.keystore.location": str(secured.keystore),
            **(security or {}),
        },
    )
    fetcher = RemoteFetcher.from_config(cfg)
    listener = settings if settings is not None else ListenerSettings(port=0, merged=False)
    endpoint = EndpointThread(fetcher, listener, secured.tmp / f"endpoint-{name}")
    try:
        yield replace(secured, fetcher=fetcher, endpoint=endpoint)
    finally:
        endpoint.close()
        fetcher.close()


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("security")
    ca = make_ca(tmp / "pki")
    kafka = SaslSslCluster(
        nodes=1,
        name="kafka-sasl-ssl",
        sasl=SaslScram(users=tuple(PASSWORDS.items()), mechanism="SCRAM-SHA-512"),
    )
    kafka.ca = ca
    kafka.keystore = issue(ca, tmp / "pki" / "broker.pem", "broker")
    kafka.start()
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, **kafka.client_config})
        suffix = uuid.uuid4().hex[:6]
        topics = {"A": f"sec-a-{suffix}", "B": f"sec-b-{suffix}"}
        for name in topics.values():
            admin.create_topics([NewTopic(name, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})])[
                name
            ].result(60)
            produce(kafka.bootstrap, name, RECORDS, size=300, **kafka.client_config)
            wait_for(
                "segments rolled", lambda n=name: len(PartitionDir(kafka.log_dir / f"{n}-0").segments) >= 2
            )
        for f in admin.create_acls(acls(topics)).values():
            f.result(30)
        sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upserts = [UserScramCredentialUpsertion(u, sha256, p.encode()) for u, p in PASSWORDS.items()]
        for f in admin.alter_user_scram_credentials(upserts).values():
            f.result(30)
        d = Daemon(_tier_config(kafka, list(topics.values()), tmp, "daemon"), once=True).start()
        try:
            assert d.run_once() == 0
        finally:
            d.stop()
        rebind_logging()
        keystore = issue(ca, tmp / "pki" / "endpoint.pem", "endpoint")
        cfg = _tier_config(
            kafka,
            list(topics.values()),
            tmp,
            "reader",
            kafka_security={
                "security.protocol": "SASL_SSL",
                "ssl.keystore.location": str(keystore),
                "authz_cache_ms": AUTHZ_CACHE_MS,
                "ssl_reload_interval_ms": 200,
                # the suite makes many failed logins from 127.0.0.1 on purpose; the failed-login
                # limits have tests of their own (test_sasl_attacks.py)
                "login_failures_per_address": 10_000,
                "login_failures_per_user": 10_000,
            },
        )
        fetcher = RemoteFetcher.from_config(cfg)
        ends: dict[str, int] = {}
        before: dict[str, list[tuple[int, bytes, bytes]]] = {}
        for key, name in topics.items():
            wait_for("remote metadata visible", lambda n=name: n in fetcher.topics())
            ends[key] = fetcher.plan(name, 0).log_end
            assert ends[key] > 1000
            before[key] = read_range(
                {"bootstrap.servers": kafka.bootstrap, **kafka.client_config}, name, ends[key]
            )
            for f in admin.delete_records([TopicPartition(name, 0, ends[key])]).values():
                f.result(30)
            pdir = kafka.log_dir / f"{name}-0"
            wait_for(
                "local segments deleted",
                lambda p=pdir, e=ends[key]: min(s.base_offset for s in PartitionDir(p).segments) > 0,
            )
        endpoint = EndpointThread(fetcher, ListenerSettings(port=0, merged=False), tmp / "endpoint")
        try:
            yield Secured(kafka, ca, topics, ends, before, fetcher, endpoint, tmp, keystore)
        finally:
            endpoint.close()
            fetcher.close()
    finally:
        kafka.stop()
