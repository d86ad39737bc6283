"""Limits before login on the Kafka endpoint, tried as an attacker would, over real TLS sockets.

An endpoint of this module's own on the shared SASL_SSL broker (``conftest.py``) with a short
login deadline and a per-address cap. Each test connects from loopback addresses of its own
(127.0.x.y), as the per-address counts are per address.

- a frame above 512 KiB before login closes the connection (Kafka's sasl.server.max.receive.size);
- a connection that does not log in within the deadline is closed, whatever it sent;
- connections per address are capped;
- hundreds of idle sockets that sent only a size prefix do not keep a logged-in client, or one
  logging in, from its answers.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka import ListenerSettings
from tests.daemon.helpers import wait_for
from tests.security.conftest import PASSWORDS, Secured, own_endpoint
from tests.security.frames import api_versions, authenticate, closed, frame, handshake, response
from tests.security.test_sasl_attacks import hs_frame, plain, tls_from, topics_seen

pytestmark = [pytest.mark.security, pytest.mark.kafka]
LOGIN_TIMEOUT_MS = 4000
PER_ADDRESS = 8
FLOOD = 300  # more than the listener's 256 connections


@pytest.fixture(scope="module")
def guarded(secured: Secured) -> Iterator[Secured]:
    settings = ListenerSettings(
        port=0, merged=False, login_timeout_ms=LOGIN_TIMEOUT_MS, max_connections_per_ip=PER_ADDRESS
    )
    with own_endpoint(secured, "prelogin", settings=settings) as guarded:
        yield guarded


def _connect(g: Secured, source: str) -> ssl.SSLSocket:
    return tls_from(g.ca.path, g.endpoint.port, source)


def _answers_api_versions(s: socket.socket, corr: int = 1) -> bool:
    try:
        s.sendall(frame(18, 3, corr, api_versions()))
        return bool(response(s, 18, 3).error_code == ErrorCode.none)
    except (ConnectionError, ssl.SSLError, OSError):
        return False


def _connects_and_answers(g: Secured, source: str) -> bool:
    """Whether a new connection from ``source`` is admitted (a refused one fails its handshake)
    and answered."""
    try:
        s = _connect(g, source)
    except (ConnectionError, ssl.SSLError, OSError):
        return False
    with s:
        return _answers_api_versions(s)


def _logged_in(g: Secured, source: str) -> ssl.SSLSocket:
    s = _connect(g, source)
    assert handshake(s, "PLAIN").error_code == ErrorCode.none
    assert authenticate(s, plain("bob", PASSWORDS["bob"])).error_code == ErrorCode.none
    return s


def test_a_frame_above_512_kib_before_login_closes(guarded: Secured) -> None:
    with _connect(guarded, "127.0.1.1") as s:
        s.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 4096)
        assert closed(s)
    with _connect(guarded, "127.0.1.1") as s:  # after a handshake too: still before login
        assert handshake(s, "PLAIN").error_code == ErrorCode.none
        s.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 4096)
        assert closed(s)
    with _logged_in(guarded, "127.0.1.1") as s:  # a logged-in client is served as before
        assert guarded.topics["B"] in topics_seen(s, 5)


@pytest.mark.parametrize(
    "sends",
    [
        b"",  # nothing at all
        struct.pack(">i", 1000),  # a size prefix, then nothing
        struct.pack(">i", 1000) + b"\0" * 100,  # part of a request
        frame(18, 3, 1, api_versions()),  # ApiVersions, then nothing (it is answered)
        hs_frame(1),
    ],
    ids=["silent", "size-prefix", "partial-request", "api-versions", "handshake-only"],
)
def test_a_connection_that_does_not_log_in_is_closed_by_the_deadline(guarded: Secured, sends: bytes) -> None:
    with _connect(guarded, "127.0.1.2") as s:
        s.sendall(sends)
        # the answer to a whole request may come first; then the end of the stream
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            if sends[4:6] == b"\x00\x12":
                response(s, 18, 3)
            elif sends[4:6] == b"\x00\x11":
                response(s, 17, 1)
        assert closed(s)  # guarded by the socket timeout (30 s) only: the deadline is 4 s


def test_connections_per_address_are_capped(guarded: Secured) -> None:
    held = [_connect(guarded, "127.0.1.3") for _ in range(PER_ADDRESS)]
    try:
        assert all(_answers_api_versions(s) for s in held)  # each one accepted and counted
        # refused on accept, before any TLS work: the client's handshake fails
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            _connect(guarded, "127.0.1.3").close()
        with _connect(guarded, "127.0.1.4") as other:  # another address is not affected
            assert _answers_api_versions(other)
        held.pop().close()
        # the slot comes back once the endpoint has seen that connection close
        wait_for("a slot freed", lambda: _connects_and_answers(guarded, "127.0.1.3"))
    finally:
        for s in held:
            s.close()


def test_a_flood_of_idle_connections_does_not_lock_out_clients(guarded: Secured) -> None:
    """300 sockets (more than the listener's 256 slots) from 38 addresses, each sending only a
    size prefix: a client logged in before still gets its answers, and one that connects during
    the flood (from an address holding none of the flood's) logs in and gets its answers."""
    before = _logged_in(guarded, "127.0.0.1")
    flood: list[ssl.SSLSocket] = []
    try:
        for i in range(FLOOD):
            try:
                s = _connect(guarded, f"127.0.2.{1 + i // PER_ADDRESS}")
                s.sendall(struct.pack(">i", 1000))
            except (ConnectionError, ssl.SSLError, OSError):
                continue  # refused (per-address cap): the attacker moves on
            flood.append(s)
        # the not-logged-in share (128) filled, and the rest of the flood refused before TLS once
        # its addresses held equal shares, instead of pushing out one of its own per reconnect
        assert len(flood) >= 128
        stats = guarded.endpoint.endpoint.stats
        assert stats["refused:unauthenticated_connections_full"] >= 1
        assert stats["tls_handshakes"] == stats["accepted"]
        assert guarded.topics["B"] in topics_seen(before, 10)
        with _logged_in(guarded, "127.0.0.1") as during:
            assert guarded.topics["B"] in topics_seen(during, 5)
        assert guarded.topics["A"] in topics_seen(before, 11)
    finally:
        before.close()
        for s in flood:
            s.close()
