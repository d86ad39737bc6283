"""The Kafka endpoint over SASL_SSL: logins relayed to the real broker, reads under its ACLs.

Against the shared SASL_SSL broker of ``conftest.py`` (StandardAuthorizer; alice may read A,
bob A and B), through the endpoint only — the tiered ranges are deleted on the broker.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.daemon.helpers import wait_for
from tests.fixtures.acls import ReadAcl
from tests.security.conftest import (
    AUTHZ_CACHE_MS,
    PASSWORDS,
    SECRETS,
    WRONG_PASSWORD,
    Secured,
    login_error,
    read_range,
)
from tests.security.frames import (
    api_versions as _api_versions,
)
from tests.security.frames import (
    authenticate as _authenticate,
)
from tests.security.frames import (
    closed as _closed,
)
from tests.security.frames import (
    frame as _frame,
)
from tests.security.frames import (
    handshake as _handshake,
)
from tests.security.frames import (
    metadata as _metadata,
)
from tests.security.frames import (
    plain_login as _plain_login,
)
from tests.security.frames import (
    response as _response,
)
from tests.security.frames import (
    tls as _tls,
)

pytestmark = [pytest.mark.security, pytest.mark.kafka]
_WAIT_S = 30  # socket timeout: only so a broken server fails the test instead of hanging it


# ---- clients read what the broker lets them read ---------------------------------------------
@pytest.mark.parametrize(
    ("user", "mechanism"), [("alice", "SCRAM-SHA-512"), ("bob", "PLAIN"), ("bob", "SCRAM-SHA-256")]
)
def test_reads_topic_a_record_for_record(secured: Secured, user: str, mechanism: str) -> None:
    got = read_range(secured.client(user, mechanism), secured.topics["A"], secured.remote_end["A"])
    assert got == secured.before["A"]


def test_bob_reads_b_alice_is_refused_b(secured: Secured) -> None:
    b = secured.topics["B"]
    assert read_range(secured.client("bob"), b, secured.remote_end["B"]) == secured.before["B"]
    # a subscribing consumer hears the broker's code from Metadata …
    c = Consumer({**secured.client("alice"), "group.id": f"alice-{uuid.uuid4().hex[:6]}"})
    try:
        c.subscribe([b])
        err = None
        give_up = time.monotonic() + 60  # only so a broken endpoint fails instead of hanging
        while err is None and time.monotonic() < give_up:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, "alice received a record of B"
                err = m.error()
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    # … and a Fetch that names B anyway gets TOPIC_AUTHORIZATION_FAILED and no bytes, while the
    # partition of A in the same request is served
    with _tls(secured) as s:
        assert _plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        s.sendall(_frame(1, 12, 4, _fetch({b: 0, secured.topics["A"]: 0})))
        resp = _response(s, 1, 12)
        by_topic = {t.topic: t.partitions[0] for t in resp.responses}
        assert by_topic[b].error_code == ErrorCode.topic_authorization_failed
        assert not by_topic[b].records
        assert by_topic[secured.topics["A"]].error_code == ErrorCode.none
        assert by_topic[secured.topics["A"]].records


def _fetch(offsets: dict[str, int], max_bytes: int = 1 << 20) -> Any:
    cls = load_request_schema(1, 12)
    mod = __import__(cls.__module__, fromlist=["FetchTopic"])
    return cls(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        topics=tuple(
            mod.FetchTopic(
                topic=t,
                partitions=(mod.FetchPartition(partition=0, fetch_offset=o, partition_max_bytes=max_bytes),),
            )
            for t, o in offsets.items()
        ),
        forgotten_topics_data=(),
    )


def test_metadata_lists_only_described_topics(secured: Secured) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    alice = AdminClient(secured.client("alice")).list_topics(timeout=30)
    assert a in alice.topics and b not in alice.topics
    bob = AdminClient(secured.client("bob", "PLAIN")).list_topics(timeout=30)
    assert {a, b} <= set(bob.topics)
    named = AdminClient(secured.client("alice")).list_topics(b, timeout=30).topics[b]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_groups_follow_the_broker_acls(secured: Secured) -> None:
    a = secured.topics["A"]
    ok = Consumer({**secured.client("alice"), "group.id": f"alice-{uuid.uuid4().hex[:6]}"})
    denied = Consumer({**secured.client("alice"), "group.id": f"other-{uuid.uuid4().hex[:6]}"})
    try:
        assert ok.committed([TopicPartition(a, 0)], timeout=30)[0].error is None
        with pytest.raises(KafkaException) as e:
            denied.committed([TopicPartition(a, 0)], timeout=30)
        assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        ok.close()
        denied.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_gets_the_brokers_error(secured: Secured, mechanism: str) -> None:
    err = login_error(secured.client("alice", mechanism, WRONG_PASSWORD))
    # librdkafka reports the broker's message (relayed as is) in its log and the error
    with _tls(secured) as s:
        resp = _plain_login(s, "alice", WRONG_PASSWORD) if mechanism == "PLAIN" else _scram_first_only(s)
        assert resp.error_code == ErrorCode.sasl_authentication_failed
        assert "Authentication failed" in (resp.error_message or "")
        s.sendall(_frame(18, 3, 9, _api_versions()))
        assert _closed(s)
    assert err.code() == KafkaError._AUTHENTICATION, err
    assert "Authentication failed" in err.str()  # the broker's message, relayed


def _scram_first_only(s: socket.socket) -> Any:
    """A SCRAM login whose final proof is wrong (a client that does not know the password)."""
    import base64

    assert _handshake(s, "SCRAM-SHA-512").error_code == ErrorCode.none
    nonce = base64.b64encode(b"0123456789abcdef").decode()
    first = _authenticate(s, f"n,,n=alice,r={nonce}".encode())
    assert first.error_code == ErrorCode.none
    server_first = bytes(first.auth_bytes).decode()
    r = dict(x.split("=", 1) for x in server_first.split(","))["r"]
    proof = base64.b64encode(bytes(64)).decode()
    return _authenticate(s, f"c=biws,r={r},p={proof}".encode(), corr=4)


def test_revoked_acl_takes_effect_within_the_cache_time(secured: Secured) -> None:
    a = secured.topics["A"]
    carol = AdminClient(secured.client("carol"))
    assert a in carol.list_topics(timeout=30).topics
    acl = ReadAcl(secured.kafka, "User:carol", a)
    acl.revoke()
    broker_conf = {k: v for k, v in secured.client("carol").items() if k != "bootstrap.servers"}
    direct = AdminClient({"bootstrap.servers": secured.kafka.bootstrap, **broker_conf})
    try:
        wait_for("the broker applies the revocation", lambda: a not in direct.list_topics(timeout=10).topics)
        time.sleep(AUTHZ_CACHE_MS / 1000 + 0.2)  # the endpoint may keep its answer this long, no longer
        assert a not in carol.list_topics(timeout=30).topics
        fresh = AdminClient(secured.client("carol"))
        assert a not in fresh.list_topics(timeout=30).topics
    finally:
        # the cluster is shared by the session: later tests count on carol's READ on A
        acl.grant()
        wait_for("the broker applies the grant again", lambda: a in direct.list_topics(timeout=10).topics)


# ---- the SASL path with raw frames -------------------------------------------------------------
def test_skipping_sasl_gets_only_api_versions(secured: Secured) -> None:
    with _tls(secured) as s:
        s.sendall(_frame(18, 3, 1, _api_versions()))
        keys = {k.api_key: (k.min_version, k.max_version) for k in _response(s, 18, 3).api_keys}
        assert keys[17] == (1, 1) and keys[36] == (0, 2)
        s.sendall(_frame(3, 12, 2, _metadata()))
        assert _closed(s)


def test_a_full_plain_login_then_metadata(secured: Secured) -> None:
    with _tls(secured) as s:
        resp = _plain_login(s, "bob", PASSWORDS["bob"])
        assert resp.error_code == ErrorCode.none
        s.sendall(_frame(3, 12, 4, _metadata()))
        names = {t.name for t in _response(s, 3, 12).topics}
        assert set(secured.topics.values()) <= names


def test_bad_sasl_input_is_refused_and_others_are_served(secured: Secured) -> None:
    cases: list[tuple[str, Any]] = []
    with _tls(secured) as s:  # an unknown mechanism: the list of enabled ones, then closed
        r = _handshake(s, "GSSAPI")
        cases.append(("unknown mechanism", r.error_code))
        assert r.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(r.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        s.sendall(_frame(18, 3, 3, _api_versions()))
        assert _closed(s)
    with _tls(secured) as s:  # SaslAuthenticate without a handshake
        r = _authenticate(s, b"\0bob\0x")
        assert r.error_code == ErrorCode.illegal_sasl_state
    for garbage in (b"", b"\xff\xfe\x00garbage", b"no-nul-separators", b"\0\0\0\0" * 64):
        with _tls(secured) as s:  # garbage PLAIN tokens: a typed SASL error, never a crash
            assert _handshake(s, "PLAIN").error_code == ErrorCode.none
            r = _authenticate(s, garbage)
            assert r.error_code == ErrorCode.sasl_authentication_failed
    for garbage in (b"\xc3\x28", b"n,,r=nouser", b"x" * 5000):
        with _tls(secured) as s:  # garbage SCRAM client-first messages
            assert _handshake(s, "SCRAM-SHA-512").error_code == ErrorCode.none
            r = _authenticate(s, garbage)
            assert r.error_code == ErrorCode.sasl_authentication_failed
    with _tls(secured) as s:  # an oversized frame before authentication: closed
        s.sendall(struct.pack(">i", 2**30) + b"\0" * 64)
        assert _closed(s)
    stalled = _tls(secured)  # a client that stops mid-authentication (handshake, then nothing)
    try:
        assert _handshake(stalled, "SCRAM-SHA-512").error_code == ErrorCode.none
        with _tls(secured) as s:  # … does not hold up anyone else
            assert _plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
            s.sendall(_frame(3, 12, 4, _metadata()))
            assert secured.topics["A"] in {t.name for t in _response(s, 3, 12).topics}
    finally:
        stalled.close()
    got = read_range(secured.client("bob", "PLAIN"), secured.topics["A"], 50)
    assert got == secured.before["A"][:50]


def test_reauthentication_keeps_the_principal(secured: Secured) -> None:
    with _tls(secured) as s:
        assert _plain_login(s, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
        # KIP-368: a new handshake + authenticate on the same, authenticated connection
        assert _handshake(s, "PLAIN", corr=5).error_code == ErrorCode.none
        assert _authenticate(s, b"\0bob\0" + PASSWORDS["bob"].encode(), corr=6).error_code == ErrorCode.none
        s.sendall(_frame(3, 12, 7, _metadata()))
        assert secured.topics["B"] in {t.name for t in _response(s, 3, 12).topics}
        # … but not as somebody else: Kafka closes the connection
        assert _handshake(s, "PLAIN", corr=8).error_code == ErrorCode.none
        s.sendall(
            _frame(
                36, 2, 9, load_request_schema(36, 2)(auth_bytes=b"\0alice\0" + PASSWORDS["alice"].encode())
            )
        )
        assert _closed(s)


def test_plaintext_client_cannot_talk_to_a_sasl_ssl_listener(secured: Secured) -> None:
    with socket.create_connection(("127.0.0.1", secured.endpoint.port), timeout=_WAIT_S) as s:
        s.sendall(_frame(18, 3, 1, _api_versions()))
        assert _closed(s)


def test_no_password_in_files_written(secured: Secured) -> None:
    """The endpoint's and the read core's files (state, metadata consumer, remote storage) and the
    broker's logs hold no password (the broker's own server.properties JAAS lines excepted)."""
    assert secured.kafka._base is not None
    roots = [secured.tmp / "reader", secured.tmp / "endpoint", secured.tmp / "daemon", secured.kafka._base]
    seen = 0
    for root in roots:
        for f in root.rglob("*"):
            if not f.is_file() or f.name == "server.properties":
                continue
            data = f.read_bytes()
            seen += 1
            for secret in SECRETS:
                assert secret.encode() not in data, f"{f} holds a password"
    assert seen > 0


def test_connection_setup_cost_is_reported(secured: Secured) -> None:
    """Connection set-up (TCP + TLS + PLAIN login + one Metadata) through the endpoint vs straight
    to the broker, same run: printed for docs/security.md, not asserted (shared CI machines)."""

    def one(port: int) -> float:
        t0 = time.perf_counter()
        ctx = ssl.create_default_context(cafile=str(secured.ca.path))
        raw = socket.create_connection(("127.0.0.1", port), timeout=_WAIT_S)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert _plain_login(s, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
            s.sendall(_frame(3, 12, 4, _metadata([secured.topics["A"]])))
            assert _response(s, 3, 12).topics[0].error_code == ErrorCode.none
        return time.perf_counter() - t0

    broker_port = int(secured.kafka.bootstrap.rsplit(":", 1)[1])
    one(secured.endpoint.port), one(broker_port)  # warm-up
    endpoint = sorted(one(secured.endpoint.port) for _ in range(15))
    broker = sorted(one(broker_port) for _ in range(15))
    print(f"connection set-up median: endpoint {endpoint[7] * 1000:.1f} ms, broker {broker[7] * 1000:.1f} ms")


def test_describe_groups_and_leader_epochs_follow_the_acls(secured: Secured) -> None:
    b = secured.topics["B"]
    with _tls(secured) as s:
        assert _plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        dg = load_request_schema(15, 5)(
            groups=("other-group", "alice-group"), include_authorized_operations=False
        )
        s.sendall(_frame(15, 5, 4, dg))
        codes = {g.group_id: g.error_code for g in _response(s, 15, 5).groups}
        assert codes["other-group"] == ErrorCode.group_authorization_failed
        assert codes["alice-group"] == ErrorCode.none
        cls = load_request_schema(23, 4)
        mod = __import__(cls.__module__, fromlist=["OffsetForLeaderTopic"])
        req = cls(
            topics=tuple(
                mod.OffsetForLeaderTopic(
                    topic=t, partitions=(mod.OffsetForLeaderPartition(partition=0, leader_epoch=0),)
                )
                for t in (b, secured.topics["A"])
            )
        )
        s.sendall(_frame(23, 4, 5, req))
        got = {t.topic: t.partitions[0] for t in _response(s, 23, 4).topics}
        assert got[b].error_code == ErrorCode.topic_authorization_failed and got[b].end_offset == -1
        assert got[secured.topics["A"]].error_code == ErrorCode.none


def test_committing_needs_read_on_the_topic(secured: Secured) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    c = Consumer({**secured.client("alice"), "group.id": f"alice-{uuid.uuid4().hex[:6]}"})
    try:
        done = c.commit(offsets=[TopicPartition(a, 0, 5)], asynchronous=False)
        assert done is not None and done[0].error is None
        try:
            res = c.commit(offsets=[TopicPartition(b, 0, 5)], asynchronous=False)
            assert res is not None
            err = res[0].error
        except KafkaException as e:
            err = e.args[0]
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert c.committed([TopicPartition(a, 0)], timeout=30)[0].offset == 5
    finally:
        c.close()
