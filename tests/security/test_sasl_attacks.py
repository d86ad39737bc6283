"""Attacks on the Kafka endpoint's SASL login, in raw protocol over real TLS sockets.

Against the shared SASL_SSL broker of ``conftest.py`` (alice may read topic A, bob A and B), with
an endpoint of this module's own (long ACL cache, low failed-login limits). Each test connects
from a loopback address of its own (127.0.0.N), so the per-address limits of one test do not
reach another.

- pipelined logins on one connection: the principal is the one whose login completed, and the
  ACL cache never holds one principal's permissions under another's name;
- pipelined handshakes: refused (ILLEGAL_SASL_STATE, closed) and no broker connection left open;
- failed-login limits per address and per user: further logins refused at once;
- standalone users: the made-up salt of an unknown SCRAM user is stable, but not sha256(name).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import ssl
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher.cluster_auth import BrokerAccess
from tests.daemon.helpers import wait_for
from tests.security.conftest import PASSWORDS, WRONG_PASSWORD, Secured, own_endpoint
from tests.security.frames import WAIT_S, authenticate, closed, frame, handshake, metadata, response
from tests.security.test_standalone_users import Standalone, standalone  # noqa: F401 (fixture)

pytestmark = [pytest.mark.security, pytest.mark.kafka]
FAILURES = 3  # the failed-login limits of this module's endpoint (per address and per user)


@pytest.fixture(scope="module")
def attacked(secured: Secured) -> Iterator[Secured]:
    security = {
        "authz_cache_ms": 120_000,  # a poisoned cache entry would outlive the test
        "login_failures_per_address": FAILURES,
        "login_failures_per_user": FAILURES,
    }
    with own_endpoint(secured, "sasl-attacks", security) as attacked:
        yield attacked


# ---- helpers (test_prelogin_limits.py uses them too) -------------------------------------------
def tls_from(ca: Any, port: int, source: str = "127.0.0.1", timeout: float = WAIT_S) -> ssl.SSLSocket:
    """A TLS connection to 127.0.0.1:``port`` from the loopback address ``source``."""
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def plain(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def hs_frame(corr: int, mechanism: str = "PLAIN") -> bytes:
    cls: Any = load_request_schema(17, 1)
    return frame(17, 1, corr, cls(mechanism=mechanism))


def auth_frame(corr: int, token: bytes) -> bytes:
    cls: Any = load_request_schema(36, 2)
    return frame(36, 2, corr, cls(auth_bytes=token))


def answers(s: socket.socket, expected: list[tuple[int, int]]) -> list[Any]:
    """The responses that arrive, in order, for requests of (key, version), until the connection
    closes (a shorter list) or all arrived."""
    got: list[Any] = []
    for key, version in expected:
        try:
            got.append(response(s, key, version))
        except (ConnectionError, ssl.SSLError, OSError):
            break
    return got


@pytest.fixture
def relay_connections(monkeypatch: pytest.MonkeyPatch) -> list[asyncio.StreamWriter]:
    """Every broker connection the endpoint opens for a SASL relay during the test (observed, not
    changed: the real connection is made and used)."""
    opened: list[asyncio.StreamWriter] = []
    connect = BrokerAccess.connect

    async def observed(self: BrokerAccess) -> Any:
        conn, broker = await connect(self)
        opened.append(conn.writer)
        return conn, broker

    monkeypatch.setattr(BrokerAccess, "connect", observed)
    return opened


def topics_seen(s: socket.socket, corr: int) -> set[str]:
    s.sendall(frame(3, 12, corr, metadata()))
    return {str(t.name) for t in response(s, 3, 12).topics}


# ---- pipelined SASL ----------------------------------------------------------------------------
def test_pipelined_right_then_wrong_login_never_acts_as_the_wrong_principal(attacked: Secured) -> None:
    """alice (right password) and bob (wrong password) pipelined on one connection: never a
    connection acting as User:bob, and bob's cached permissions are bob's, not alice's."""
    port, ca = attacked.endpoint.port, attacked.ca.path
    with tls_from(ca, port, "127.0.0.11") as s:
        assert handshake(s, "PLAIN", corr=1).error_code == ErrorCode.none
        s.sendall(
            auth_frame(2, plain("alice", PASSWORDS["alice"]))
            + auth_frame(3, plain("bob", WRONG_PASSWORD))
            + frame(3, 12, 4, metadata())
        )
        got = answers(s, [(36, 2), (36, 2), (3, 12)])
        assert got[0].error_code == ErrorCode.none  # alice's login completed: the connection is alice's
        assert got[1].error_code != ErrorCode.none  # a login message after the login: refused
        assert len(got) == 2 and closed(s)  # ... and the connection closed: no Metadata as anyone
    # the broker's answer for alice was never cached as bob's: bob sees what bob may see
    with tls_from(ca, port, "127.0.0.11") as s:
        assert handshake(s, "PLAIN").error_code == ErrorCode.none
        assert authenticate(s, plain("bob", PASSWORDS["bob"])).error_code == ErrorCode.none
        assert set(attacked.topics.values()) <= topics_seen(s, 5)
    with tls_from(ca, port, "127.0.0.11") as s:  # and alice still sees only what alice may see
        assert handshake(s, "PLAIN").error_code == ErrorCode.none
        assert authenticate(s, plain("alice", PASSWORDS["alice"])).error_code == ErrorCode.none
        seen = topics_seen(s, 5)
        assert attacked.topics["A"] in seen and attacked.topics["B"] not in seen


def test_pipelined_handshakes_are_refused_and_leave_no_broker_connection(
    attacked: Secured, relay_connections: list[asyncio.StreamWriter]
) -> None:
    port, ca = attacked.endpoint.port, attacked.ca.path
    s = tls_from(ca, port, "127.0.0.12")
    s.sendall(b"".join(hs_frame(corr) for corr in range(1, 9)))
    got = answers(s, [(17, 1)] * 8)
    assert got[0].error_code == ErrorCode.none
    assert [r.error_code for r in got[1:]] == [ErrorCode.illegal_sasl_state]  # the second, then closed
    assert closed(s)
    s.close()
    # a client that leaves mid-login (handshakes sent, then gone) leaves none either
    for _ in range(4):
        s = tls_from(ca, port, "127.0.0.12")
        s.sendall(hs_frame(1) + hs_frame(2, "SCRAM-SHA-512"))
        s.close()
    wait_for("the endpoint done with every client", lambda: attacked.endpoint.endpoint.connections == 0)
    assert relay_connections  # logins were relayed
    wait_for("every relay connection closed", lambda: all(w.is_closing() for w in relay_connections))


def test_login_messages_pipelined_after_a_handshake_are_taken_one_at_a_time(attacked: Secured) -> None:
    """Two SCRAM first messages for different users pipelined: the second is refused, the first's
    exchange is not overwritten."""
    port, ca = attacked.endpoint.port, attacked.ca.path
    nonce = base64.b64encode(os.urandom(18)).decode()
    with tls_from(ca, port, "127.0.0.13") as s:
        assert handshake(s, "SCRAM-SHA-512", corr=1).error_code == ErrorCode.none
        firsts = (f"n,,n={user},r={nonce}".encode() for user in ("alice", "bob"))
        s.sendall(b"".join(auth_frame(corr, token) for corr, token in enumerate(firsts, start=2)))
        got = answers(s, [(36, 2), (36, 2)])
        assert got[0].error_code == ErrorCode.none  # alice's server-first message
        assert bytes(got[0].auth_bytes).startswith(b"r=" + nonce.encode())
        # the second is taken as alice's final message, which it is not: refused, never a login
        assert len(got) == 2 and got[1].error_code == ErrorCode.sasl_authentication_failed
        assert closed(s)


# ---- failed-login limits -----------------------------------------------------------------------
def _plain_login_from(attacked: Secured, source: str, user: str, password: str) -> Any:
    with tls_from(attacked.ca.path, attacked.endpoint.port, source) as s:
        assert handshake(s, "PLAIN").error_code == ErrorCode.none
        return authenticate(s, plain(user, password))


def test_failed_logins_per_address_are_limited(attacked: Secured) -> None:
    for _ in range(FAILURES):
        r = _plain_login_from(attacked, "127.0.0.21", "carol", WRONG_PASSWORD)
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert "too many" not in str(r.error_message)  # the broker's own refusal
    # the address is refused now, even with the right password, without asking the broker
    r = _plain_login_from(attacked, "127.0.0.21", "bob", PASSWORDS["bob"])
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "too many failed logins" in str(r.error_message)
    # another address is not
    assert _plain_login_from(attacked, "127.0.0.22", "bob", PASSWORDS["bob"]).error_code == ErrorCode.none


def test_failed_logins_per_user_are_limited(attacked: Secured) -> None:
    for i in range(FAILURES):  # from different addresses: only the user's count reaches the limit
        r = _plain_login_from(attacked, f"127.0.0.{31 + i}", "alice", WRONG_PASSWORD)
        assert r.error_code == ErrorCode.sasl_authentication_failed
    r = _plain_login_from(attacked, "127.0.0.39", "alice", PASSWORDS["alice"])
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "too many failed logins" in str(r.error_message)
    # the same address logs in as another user
    assert _plain_login_from(attacked, "127.0.0.39", "bob", PASSWORDS["bob"]).error_code == ErrorCode.none


# ---- standalone users: what a login tells about who exists ---------------------------------------
def _scram_salt(users: Standalone, user: str) -> bytes:
    ctx = ssl.create_default_context(cafile=str(users.ca))
    raw = socket.create_connection(("127.0.0.1", users.endpoint.port), timeout=WAIT_S)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert handshake(s, "SCRAM-SHA-512").error_code == ErrorCode.none
        nonce = base64.b64encode(os.urandom(18)).decode()
        r = authenticate(s, f"n,,n={user},r={nonce}".encode())
        assert r.error_code == ErrorCode.none
        fields = dict(p.split("=", 1) for p in bytes(r.auth_bytes).decode().split(","))
        return base64.b64decode(fields["s"])


def test_unknown_scram_users_salt_is_stable_but_not_derivable(standalone: Standalone) -> None:  # noqa: F811
    first = _scram_salt(standalone, "mallory")
    assert _scram_salt(standalone, "mallory") == first  # the same answer each time: no tell
    assert _scram_salt(standalone, "trudy") != first
    for algo in ("sha256", "sha512", "sha1", "md5"):  # not computable from the name alone
        digest = hashlib.new(algo, b"mallory").digest()
        assert first not in (digest[: len(first)], digest)
    assert len(first) == 24  # as long as a real salt (scram_credential's)
    assert len(_scram_salt(standalone, "alice")) == 24


def test_oversized_login_frame_from_a_standalone_client_closes(standalone: Standalone) -> None:  # noqa: F811
    ctx = ssl.create_default_context(cafile=str(standalone.ca))
    raw = socket.create_connection(("127.0.0.1", standalone.endpoint.port), timeout=WAIT_S)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
        assert closed(s)
