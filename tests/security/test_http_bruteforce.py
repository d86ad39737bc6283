"""Failed-login limits on the HTTP API (issue 38): the sidecar is no brute-force proxy.

Every HTTP Basic login is relayed to the broker; without a limit each wrong guess cost a broker
connection and nothing stopped a guesser. Here, per client address and per user (Basic) and per
address (bearer tokens, the static token), a client over its limit is answered 429 with
``Retry-After`` before anything is checked: even the right password is refused then, and the
broker sees no further login. Clients come from distinct loopback addresses (127.0.0.x) against
the real SASL_SSL broker of the security suite.
"""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fetcher.cluster_auth import token_hash
from fetcher.http.broker_auth import HttpBrokerAuth
from fetcher.http.server import HttpApiServer
from rlm.config import ListenerSecurity
from tests.security.conftest import PASSWORDS, WRONG_PASSWORD, Secured

pytestmark = [pytest.mark.security, pytest.mark.kafka]

WINDOW_MS = 600_000  # longer than any test: a refusal seen here cannot have lapsed


class Client:
    """HTTP(S) requests to one server from one source address."""

    def __init__(self, port: int, source: str, ca: Path | None) -> None:
        self.port, self.source, self.ca = port, source, ca

    def get(self, authorization: str | None, path: str = "/v1/topics") -> tuple[int, dict[str, str], Any]:
        conn: http.client.HTTPConnection
        if self.ca is not None:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=ctx,
                                               source_address=(self.source, 0))
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                              source_address=(self.source, 0))
        try:
            conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
            r = conn.getresponse()
            body = r.read()
            headers = {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()
        return r.status, headers, json.loads(body) if body else None

    def basic(self, user: str, password: str | None = None) -> tuple[int, dict[str, str], Any]:
        pw = PASSWORDS[user] if password is None else password
        return self.get("Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode())

    def bearer(self, token: str) -> tuple[int, dict[str, str], Any]:
        return self.get(f"Bearer {token}")


def _refused(answer: tuple[int, dict[str, str], Any]) -> bool:
    status, headers, body = answer
    return (status == 429 and headers.get("retry-after") == str(WINDOW_MS // 1000)
            and body["error"] == "too_many_failed_logins")


@contextmanager
def serving(secured: Secured, token: str | None = None, **sec: Any) -> Iterator[HttpApiServer]:
    settings = ListenerSecurity.model_validate({"login_failure_window_ms": WINDOW_MS, **sec})
    server = HttpApiServer(secured.fetcher, "127.0.0.1", 0, token=token, security=settings).start()
    try:
        yield server
    finally:
        server.stop()


def _basic_https(secured: Secured, **limits: int) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "ssl.keystore.location": str(secured.keystore),
            "sasl.enabled.mechanisms": ["SCRAM-SHA-512"], **limits}


def test_basic_guesses_from_one_address_stop_reaching_the_broker(secured: Secured) -> None:
    with serving(secured, **_basic_https(secured, login_failures_per_address=3,
                                         login_failures_per_user=1000)) as server:
        guesser = Client(server.port, "127.0.0.2", secured.ca.path)
        assert guesser.basic("alice")[0] == 200  # a valid login, cached by the server
        for user in ("alice", "bob", "carol"):
            assert guesser.basic(user, WRONG_PASSWORD)[0] == 401
        # over the limit: refused before the cache or the broker, even with the right password
        assert _refused(guesser.basic("alice"))
        assert _refused(guesser.basic("bob"))
        gate = server.gate
        assert isinstance(gate, HttpBrokerAuth)
        relayed = gate.broker_logins
        for i in range(30):
            assert _refused(guesser.basic("alice", f"guess-{i}"))
        assert _refused(guesser.get("Basic !!not-base64!!"))
        assert gate.broker_logins == relayed == 4  # 1 valid + 3 wrong: the 32 later tries never left
        # other addresses are not affected
        assert Client(server.port, "127.0.0.3", secured.ca.path).basic("alice")[0] == 200


def test_basic_guesses_for_one_user_from_many_addresses(secured: Secured) -> None:
    with serving(secured, **_basic_https(secured, login_failures_per_address=1000,
                                         login_failures_per_user=3)) as server:
        for i in (2, 3, 4):
            client = Client(server.port, f"127.0.0.{i}", secured.ca.path)
            assert client.basic("alice", WRONG_PASSWORD)[0] == 401
        fresh = Client(server.port, "127.0.0.5", secured.ca.path)
        assert _refused(fresh.basic("alice"))  # the user is locked for the window, from anywhere
        assert fresh.basic("bob")[0] == 200  # other users are not


def test_a_successful_login_clears_the_users_count(secured: Secured) -> None:
    with serving(secured, **_basic_https(secured, login_failures_per_address=1000,
                                         login_failures_per_user=3)) as server:
        c = Client(server.port, "127.0.0.6", secured.ca.path)
        for _ in range(2):
            assert c.basic("carol", WRONG_PASSWORD)[0] == 401
        assert c.basic("carol")[0] == 200
        for _ in range(2):
            assert c.basic("carol", WRONG_PASSWORD)[0] == 401  # 2 since the login: not yet 3
        assert c.basic("carol")[0] == 200


def test_requests_without_credentials_are_not_login_attempts(secured: Secured) -> None:
    with serving(secured, **_basic_https(secured, login_failures_per_address=2)) as server:
        c = Client(server.port, "127.0.0.7", secured.ca.path)
        for _ in range(10):
            assert c.get(None)[0] == 401
        assert c.basic("alice")[0] == 200


def test_unknown_bearer_tokens_per_address_with_the_broker(secured: Secured) -> None:
    alice = secrets.token_urlsafe(32)
    sec: dict[str, Any] = {"security.protocol": "SSL", "ssl.keystore.location": str(secured.keystore),
           "bearer_tokens": [{"principal": "User:alice", "sha256": token_hash(alice)}],
           "login_failures_per_address": 3}
    with serving(secured, **sec) as server:
        guesser = Client(server.port, "127.0.0.8", secured.ca.path)
        for _ in range(3):
            assert guesser.bearer(secrets.token_urlsafe(32))[0] == 401
        assert _refused(guesser.bearer(alice))
        assert _refused(guesser.get("Basic " + base64.b64encode(b"alice:x").decode()))
        assert Client(server.port, "127.0.0.9", secured.ca.path).bearer(alice)[0] == 200


def test_unknown_bearer_tokens_per_address_standalone(secured: Secured) -> None:
    alice = secrets.token_urlsafe(32)
    sec: dict[str, Any] = {"bearer_tokens": [{"principal": "User:alice", "sha256": token_hash(alice)}],
           "allow": [{"principal": "User:alice", "topics": ["*"]}], "login_failures_per_address": 3}
    with serving(secured, **sec) as server:
        guesser = Client(server.port, "127.0.0.10", None)
        for _ in range(3):
            assert guesser.bearer(secrets.token_urlsafe(32))[0] == 401
        assert _refused(guesser.bearer(alice))
        assert Client(server.port, "127.0.0.11", None).bearer(alice)[0] == 200


def test_wrong_static_tokens_per_address(secured: Secured) -> None:
    token = secrets.token_urlsafe(32)
    with serving(secured, token=token, login_failures_per_address=3) as server:
        guesser = Client(server.port, "127.0.0.12", None)
        for _ in range(3):
            assert guesser.bearer(secrets.token_urlsafe(32))[0] == 401
        assert _refused(guesser.bearer(token))
        assert Client(server.port, "127.0.0.13", None).bearer(token)[0] == 200
        assert guesser.get(None, "/health")[0] == 200  # probes need no secret, refused or not
