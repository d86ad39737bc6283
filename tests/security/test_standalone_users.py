"""Standalone mode (no broker): a static user list with SCRAM credentials — never passwords — and
per-topic allow rules; confluent-kafka logs in with SCRAM and PLAIN over SASL_SSL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from fetcher.kafka.local_auth import scram_credential
from rlm.config import load_config
from rlm.log.partition import PartitionDir
from rlm.log.records import Record, iter_records
from rlm.types import KafkaUuid
from tests.daemon.test_standalone import run_once, write_partition
from tests.security.certs import issue, make_ca
from tests.security.conftest import login_error, rebind_logging

pytestmark = [pytest.mark.security]
PW = {"alice": "alice-local-pw-31", "bob": "bob-local-pw-48"}


@dataclass
class Standalone:
    endpoint: EndpointThread
    ca: Path
    expected: dict[str, list[tuple[int, bytes | None]]]
    config_text: str


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    tmp = tmp_path_factory.mktemp("standalone-users")
    logs = tmp / "logs"
    expected: dict[str, list[tuple[int, bytes | None]]] = {}
    for topic in ("pub", "priv"):
        write_partition(logs, topic, 0, 40, topic_id=KafkaUuid.random())
    ca = make_ca(tmp / "pki")
    keystore = issue(ca, tmp / "pki" / "endpoint.pem", "endpoint")
    security = {
        "security.protocol": "SASL_SSL",
        "ssl.keystore.location": str(keystore),
        "users": [
            {"name": "alice", "scram_sha_512": scram_credential(PW["alice"], "SCRAM-SHA-512")},
            {"name": "bob", "scram_sha_256": scram_credential(PW["bob"], "SCRAM-SHA-256")},
        ],
        "allow": [
            {"principal": "User:alice", "topics": ["pub*"], "groups": ["alice-*"]},
            {"principal": "User:bob", "topics": ["*"], "groups": ["*"]},
        ],
    }
    doc = {
        "log_dirs": [str(logs)],
        "work_dir": str(tmp / "work"),
        "http": {"enabled": False},
        "topics": [{"pattern": "*", "remote.storage.enable": True}],
        "read": {"kafka_security": security},
    }
    import yaml

    cfg_file = tmp / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump(doc))
    cfg = load_config(cfg_file)
    run_once(cfg)
    rebind_logging()
    fetcher = RemoteFetcher.from_config(cfg)
    for topic in ("pub", "priv"):
        end = fetcher.plan(topic, 0).log_end
        expected[topic] = [
            (r.offset, r.key)
            for seg in PartitionDir(logs / f"{topic}-0").inactive_segments()
            for h, r in iter_records(seg.log_path)
            if isinstance(r, Record) and not h.is_control and r.offset < end
        ]
    endpoint = EndpointThread(fetcher, ListenerSettings(port=0, merged=False), tmp / "endpoint")
    try:
        yield Standalone(endpoint, ca.path, expected, cfg_file.read_text())
    finally:
        endpoint.close()
        fetcher.close()


def _conf(s: Standalone, user: str, mechanism: str, password: str | None = None) -> dict[str, str]:
    return {
        "bootstrap.servers": s.endpoint.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": PW[user] if password is None else password,
        "ssl.ca.location": str(s.ca),
    }


def _read(conf: dict[str, str], topic: str, n: int) -> list[tuple[int, bytes | None]]:
    c = Consumer(
        {
            **conf,
            "group.id": f"alice-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
    )
    got: list[tuple[int, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        import time

        give_up = time.monotonic() + 60  # only so a broken endpoint fails instead of hanging
        while len(got) < n and time.monotonic() < give_up:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.key()))
    finally:
        c.close()
    return got


def test_the_config_holds_no_password(standalone: Standalone) -> None:
    assert not any(pw in standalone.config_text for pw in PW.values())


@pytest.mark.parametrize(
    ("user", "mechanism"),
    [("alice", "SCRAM-SHA-512"), ("alice", "PLAIN"), ("bob", "SCRAM-SHA-256"), ("bob", "PLAIN")],
)
def test_users_read_what_the_rules_allow(standalone: Standalone, user: str, mechanism: str) -> None:
    want = standalone.expected["pub"]
    assert _read(_conf(standalone, user, mechanism), "pub", len(want)) == want
    topics = set(AdminClient(_conf(standalone, user, mechanism)).list_topics(timeout=30).topics)
    assert ("priv" in topics) == (user == "bob")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_or_unknown_user_is_refused(standalone: Standalone, mechanism: str) -> None:
    for user, pw in (("alice", "not-it"), ("bob", PW["alice"]), ("nobody", PW["alice"])):
        conf = {**_conf(standalone, "alice", mechanism), "sasl.username": user, "sasl.password": pw}
        err = login_error(conf)
        assert err.code() == KafkaError._AUTHENTICATION, err
    # the right password is served (the refusals were about the credentials, not the listener)
    owner = "bob" if mechanism == "SCRAM-SHA-256" else "alice"  # who has a credential for it
    assert "pub" in AdminClient(_conf(standalone, owner, mechanism)).list_topics(timeout=30).topics
