"""The HTTP API over TLS with HTTP Basic checked by the broker and topics authorized by its ACLs:
the same principals and answers as the Kafka endpoint (alice reads A only, bob A and B)."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from fetcher.http.openapi import openapi_document
from fetcher.http.server import HttpApiServer
from rlm.config import ListenerSecurity
from tests.security.conftest import PASSWORDS, SECRETS, WRONG_PASSWORD, Secured

pytestmark = [pytest.mark.security, pytest.mark.kafka]


@pytest.fixture(scope="module")
def https(secured: Secured) -> Iterator[str]:
    sec = ListenerSecurity.model_validate(
        {
            "security.protocol": "SASL_SSL",
            "ssl.keystore.location": str(secured.keystore),
            "sasl.enabled.mechanisms": ["SCRAM-SHA-512"],
            "authz_cache_ms": 1500,
        }
    )
    server = HttpApiServer(secured.fetcher, "127.0.0.1", 0, security=sec).start()
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _get(secured: Secured, url: str, user: str | None = None, password: str | None = None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(secured.ca.path))
    req = urllib.request.Request(url)
    if user is not None:
        pw = PASSWORDS[user] if password is None else password
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            body = r.read()
            status = r.status
            ctype = r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        body, status, ctype = e.read(), e.code, e.headers.get("content-type", "")
    for secret in SECRETS:
        assert secret.encode() not in body
    return status, (json.loads(body) if ctype.startswith("application/json") else body)


def test_no_or_wrong_credentials_get_401_json(secured: Secured, https: str) -> None:
    for user, pw in ((None, None), ("alice", WRONG_PASSWORD), ("nobody", "x")):
        status, body = _get(secured, f"{https}/v1/topics", user, pw)
        assert status == 401 and body == {"error": "unauthorized", "message": "authentication required"}
    assert _get(secured, f"{https}/health")[0] == 200  # probes need no secret


def test_topic_listing_follows_describe(secured: Secured, https: str) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    status, body = _get(secured, f"{https}/v1/topics", "alice")
    assert status == 200
    names = {t["topic"] for t in body["topics"]}
    assert a in names and b not in names
    status, body = _get(secured, f"{https}/v1/topics", "bob")
    assert status == 200 and {a, b} <= {t["topic"] for t in body["topics"]}


def test_records_follow_read(secured: Secured, https: str) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    path = "/partitions/0/records?offset=0&max_bytes=4096&format=json"
    status, body = _get(secured, f"{https}/v1/topics/{b}{path}", "alice")
    assert status == 403 and body == {"error": "forbidden", "message": "forbidden"}
    status, _ = _get(secured, f"{https}/v1/topics/{b}/partitions/0/segments", "alice")
    assert status == 403
    status, body = _get(secured, f"{https}/v1/topics/{b}{path}", "bob")
    assert status == 200 and body
    status, body = _get(secured, f"{https}/v1/topics/{a}{path}", "alice")
    assert status == 200 and body


# ---- property-based, with and without credentials ------------------------------------------
_PATHS = [p for p in openapi_document()["paths"] if p != "/health"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("who", [None, "alice", "bob"])
@pytest.mark.parametrize("path", _PATHS)
def test_schemathesis_with_and_without_credentials(
    secured: Secured, https: str, who: str | None, path: str
) -> None:
    """No 5xx; without credentials always 401; alice never gets a 2xx for B (pinned to B: 403);
    bob's answers for B may be data."""
    schema = schemathesis.openapi.from_dict(openapi_document())
    schema.config.base_url = https
    operation = schema[path]["GET"]
    b = secured.topics["B"]
    pinned = {"topic": b} | ({"partition": 0} if "{partition}" in path else {}) if "{topic}" in path else None
    headers = {}
    if who is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{who}:{PASSWORDS[who]}".encode()).decode()

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE, path_parameters=pinned))
    @settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        r = case.call(timeout=30, headers=headers, verify=str(secured.ca.path))
        assert r.status_code < 500, (case.formatted_path, r.status_code, r.text[:300])
        if who is None:
            assert r.status_code == 401
        elif who == "alice" and pinned is not None:
            assert r.status_code == 403, (case.formatted_path, r.status_code)
        if who == "alice" and r.status_code < 300:
            assert b.encode() not in r.content

    run()


def test_https_mtls_and_certificate_rotation(secured: Secured) -> None:
    """HTTPS with ssl.client.auth=required: no client certificate, no answer; a rotated server
    certificate is served without a restart."""
    import socket

    from cryptography import x509

    from tests.daemon.helpers import wait_for
    from tests.security.certs import issue

    pki = secured.tmp / "pki-http"
    pki.mkdir(exist_ok=True)
    keystore = issue(secured.ca, pki / "server.pem", "http-server")
    client = issue(secured.ca, pki / "client.pem", "http-client", server=False)
    sec = ListenerSecurity.model_validate(
        {
            "security.protocol": "SSL",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.location": str(secured.ca.path),
            "ssl.client.auth": "required",
            "ssl_reload_interval_ms": 100,
        }
    )
    server = HttpApiServer(secured.fetcher, "127.0.0.1", 0, security=sec).start()
    try:
        url = f"https://127.0.0.1:{server.port}/health"
        anonymous = ssl.create_default_context(cafile=str(secured.ca.path))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, context=anonymous, timeout=10).read()
        with_cert = ssl.create_default_context(cafile=str(secured.ca.path))
        with_cert.load_cert_chain(str(client))
        with urllib.request.urlopen(url, context=with_cert, timeout=10) as r:
            assert r.status == 200

        def served_serial() -> int:
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            with with_cert.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                der = s.getpeercert(binary_form=True)
                assert der is not None
                return x509.load_der_x509_certificate(der).serial_number

        issue(secured.ca, keystore, "http-server-rotated")
        new = x509.load_pem_x509_certificate(keystore.read_bytes()).serial_number
        wait_for("the rotated certificate is served", lambda: served_serial() == new, timeout=30)
    finally:
        server.stop()
