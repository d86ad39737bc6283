"""HTTP bearer tokens mapped to principals, over real sockets.

Broker mode (HTTPS, tokens by SHA-256 in a file and in the config): a token's principal reads
what the SASL_SSL broker's ACLs let it read (alice A, bob A and B, dave nothing until an ACL is
added), read live with the sidecar's login. Standalone mode: the same tokens, topics by allow
rules. Tokens never appear in files, output or answers.
"""

from __future__ import annotations

import json
import re
import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from fetcher.cluster_auth import token_hash
from fetcher.http.openapi import openapi_document
from fetcher.http.server import HttpApiServer
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError
from tests.daemon.helpers import wait_for
from tests.fixtures.acls import ReadAcl
from tests.security.conftest import Secured

pytestmark = [pytest.mark.security, pytest.mark.kafka]

TOKENS = {u: secrets.token_urlsafe(32) for u in ("alice", "bob", "dave")}
_RECORDS = "/partitions/0/records?offset=0&max_bytes=4096&format=json"


@pytest.fixture(scope="module")
def bearer(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("bearer")
    hashes = d / "tokens.txt"
    hashes.write_text(
        f"# sha256 principal\n{token_hash(TOKENS['alice'])} User:alice\n{token_hash(TOKENS['bob'])} bob\n"
    )
    sec = ListenerSecurity.model_validate(
        {
            "security.protocol": "SSL",
            "ssl.keystore.location": str(secured.keystore),
            "authz_cache_ms": 500,
            "bearer_tokens_file": str(hashes),
            "bearer_tokens": [{"principal": "User:dave", "sha256": token_hash(TOKENS["dave"]).upper()}],
        }
    )
    server = HttpApiServer(secured.fetcher, "127.0.0.1", 0, security=sec).start()
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        server.stop()
    for f in d.rglob("*"):
        assert not any(t.encode() in f.read_bytes() for t in TOKENS.values())


def _get(secured: Secured | None, url: str, token: str | None) -> tuple[int, Any, str]:
    ctx = ssl.create_default_context(cafile=str(secured.ca.path)) if secured is not None else None
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            body, status, challenge = r.read(), r.status, ""
    except urllib.error.HTTPError as e:
        body, status, challenge = e.read(), e.code, e.headers.get("www-authenticate", "")
    assert not any(t.encode() in body for t in TOKENS.values())
    return status, (json.loads(body) if status != 200 or b"\n{" not in body else body), challenge


def _listed(secured: Secured | None, url: str, token: str) -> set[str]:
    status, body, _ = _get(secured, f"{url}/v1/topics", token)
    assert status == 200
    return {t["topic"] for t in body["topics"]}


def test_tokens_read_what_the_broker_acls_allow(
    secured: Secured, bearer: str, capfd: pytest.CaptureFixture[str]
) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    assert a in _listed(secured, bearer, TOKENS["alice"]) and b not in _listed(
        secured, bearer, TOKENS["alice"]
    )
    assert {a, b} <= _listed(secured, bearer, TOKENS["bob"])
    assert not {a, b} & _listed(secured, bearer, TOKENS["dave"])
    for _ in range(3):  # refused each time, logged once
        assert _get(secured, f"{bearer}/v1/topics/{b}{_RECORDS}", TOKENS["alice"])[:2] == (
            403,
            {"error": "forbidden", "message": "forbidden"},
        )
    status, body, _ = _get(secured, f"{bearer}/v1/topics/{a}{_RECORDS}", TOKENS["alice"])
    assert status == 200 and body
    assert _get(secured, f"{bearer}/v1/topics/{b}{_RECORDS}", TOKENS["bob"])[0] == 200
    assert _get(secured, f"{bearer}/v1/topics/{a}{_RECORDS}", TOKENS["dave"])[0] == 403
    for token in (None, "not-a-token", TOKENS["alice"] + "x"):
        status, body, challenge = _get(secured, f"{bearer}/v1/topics", token)
        assert status == 401 and body == {"error": "unauthorized", "message": "authentication required"}
        assert challenge.startswith("Bearer")
    assert _get(secured, f"{bearer}/health", None)[0] == 200
    out, err = capfd.readouterr()
    denials = [
        line
        for line in (out + err).splitlines()
        if "http_request_denied" in line and "User:alice" in line and b in line
    ]
    assert len(denials) == 1 and re.search(r"reason=.?no READ on topic", denials[0]), denials
    assert not any(t in out + err for t in TOKENS.values())


def test_an_acl_added_and_removed_on_the_broker_follows(secured: Secured, bearer: str) -> None:
    a = secured.topics["A"]
    with ReadAcl(secured.kafka, "User:dave", a):
        wait_for(
            "dave reads A",
            lambda: _get(secured, f"{bearer}/v1/topics/{a}{_RECORDS}", TOKENS["dave"])[0] == 200,
        )
    wait_for(
        "dave refused A again",
        lambda: _get(secured, f"{bearer}/v1/topics/{a}{_RECORDS}", TOKENS["dave"])[0] == 403,
    )


def test_standalone_tokens_follow_the_allow_rules(secured: Secured) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    sec = ListenerSecurity.model_validate(
        {
            "bearer_tokens": [
                {"principal": "User:alice", "sha256": token_hash(TOKENS["alice"])},
                {"principal": "User:bob", "sha256": token_hash(TOKENS["bob"])},
            ],
            "allow": [
                {"principal": "User:alice", "topics": [a]},
                {"principal": "User:bob", "topics": ["sec-*"]},
            ],
        }
    )
    server = HttpApiServer(secured.fetcher, "127.0.0.1", 0, security=sec).start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        assert a in _listed(None, url, TOKENS["alice"]) and b not in _listed(None, url, TOKENS["alice"])
        assert {a, b} <= _listed(None, url, TOKENS["bob"])
        assert _get(None, f"{url}/v1/topics/{b}{_RECORDS}", TOKENS["alice"])[0] == 403
        assert _get(None, f"{url}/v1/topics/{b}{_RECORDS}", TOKENS["bob"])[0] == 200
        assert _get(None, f"{url}/v1/topics", TOKENS["dave"])[0] == 401
    finally:
        server.stop()


def test_a_plain_token_in_the_configuration_is_refused(secured: Secured, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sha256"):
        ListenerSecurity.model_validate({"bearer_tokens": [{"principal": "x", "sha256": TOKENS["alice"]}]})
    f = tmp_path / "tokens.txt"
    f.write_text(f"{TOKENS['alice']} User:alice\n")
    sec = ListenerSecurity.model_validate({"bearer_tokens_file": str(f)})
    with pytest.raises(ConfigError, match="SHA-256") as e:
        HttpApiServer(secured.fetcher, "127.0.0.1", 0, security=sec)
    assert TOKENS["alice"] not in str(e.value)


_TOPIC_PATHS = [p for p in openapi_document()["paths"] if "{topic}" in p]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("who", ["alice", "forged", "bob"])
@pytest.mark.parametrize("path", _TOPIC_PATHS)
def test_schemathesis_with_bearer_tokens(secured: Secured, bearer: str, who: str, path: str) -> None:
    """Generated requests pinned to topic B with a token: no 5xx; a forged token always 401 (429
    after the per-address failed-login limit, test_http_bruteforce.py);
    alice's token (no ACL on B) always 403 and never B's data; bob's token may read B."""
    schema = schemathesis.openapi.from_dict(openapi_document())
    schema.config.base_url = bearer
    operation = schema[path]["GET"]
    b = secured.topics["B"]
    pinned = {"topic": b} | ({"partition": 0} if "{partition}" in path else {})
    token = TOKENS.get(who) or secrets.token_urlsafe(32)
    headers = {"Authorization": f"Bearer {token}"}

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE, path_parameters=pinned))
    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        r = case.call(timeout=30, headers=headers, verify=str(secured.ca.path))
        assert r.status_code < 500, (case.formatted_path, r.status_code, r.text[:300])
        assert token.encode() not in r.content
        if who == "forged":  # refused: 401, or 429 once the address is over its failed-login limit
            assert r.status_code in (401, 429), (case.formatted_path, r.status_code)
        elif who == "alice":
            assert r.status_code == 403, (case.formatted_path, r.status_code)
            assert b.encode() not in r.content

    run()
