"""TLS on the Kafka endpoint: mTLS refuses a client without a certificate; a certificate rotated
on disk is served to new connections without a restart (file watch and the SIGHUP path)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from cryptography import x509

from fetcher.kafka import EndpointThread
from tests.daemon.helpers import wait_for
from tests.security.certs import issue
from tests.security.conftest import Secured, own_endpoint

pytestmark = [pytest.mark.security, pytest.mark.kafka]
_WAIT_S = 30


@dataclass
class Mtls:
    endpoint: EndpointThread
    keystore: Path
    client: Path  # client certificate + key (one PEM)
    ca: Path


@pytest.fixture(scope="module")
def mtls(secured: Secured) -> Iterator[Mtls]:
    pki = secured.tmp / "pki-mtls"
    pki.mkdir()
    keystore = issue(secured.ca, pki / "endpoint.pem", "endpoint-mtls")
    client = issue(secured.ca, pki / "client.pem", "reader-client", server=False)
    security = {
        "security.protocol": "SSL",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(secured.ca.path),
        "ssl.client.auth": "required",
        "ssl_reload_interval_ms": 100,
    }
    with own_endpoint(secured, "mtls", security) as own:
        yield Mtls(own.endpoint, keystore, client, secured.ca.path)


def _served_serial(m: Mtls, with_cert: bool = True) -> int:
    ctx = ssl.create_default_context(cafile=str(m.ca))
    if with_cert:
        ctx.load_cert_chain(str(m.client))
    with (
        socket.create_connection(("127.0.0.1", m.endpoint.port), timeout=_WAIT_S) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        s.sendall(b"\0\0\0\x0a\0\x12\0\0\0\0\0\x01\xff\xff")  # ApiVersions v0: proves the session
        if len(s.recv(4)) != 4:
            raise ConnectionError("closed by the endpoint")
        der = s.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


def _serial_on_disk(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_client_without_certificate_is_refused(mtls: Mtls) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _served_serial(mtls, with_cert=False)
    assert _served_serial(mtls) == _serial_on_disk(mtls.keystore)


def test_confluent_kafka_over_mtls(mtls: Mtls, secured: Secured) -> None:
    conf = {
        "bootstrap.servers": mtls.endpoint.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(mtls.ca),
        "ssl.certificate.location": str(mtls.client),
        "ssl.key.location": str(mtls.client),
    }
    assert set(secured.topics.values()) <= set(AdminClient(conf).list_topics(timeout=30).topics)


def test_rotated_certificate_is_served_without_restart(mtls: Mtls, secured: Secured) -> None:
    old = _served_serial(mtls)
    issue(secured.ca, mtls.keystore, "endpoint-mtls-rotated")  # atomic replace, as cert-manager does
    new = _serial_on_disk(mtls.keystore)
    assert new != old
    wait_for("the rotated certificate is served", lambda: _served_serial(mtls) == new, timeout=30)
    tls = mtls.endpoint.endpoint.security.tls
    assert tls is not None and tls.reloads >= 1
    # the SIGHUP path: an explicit reload picks up the file at once
    issue(secured.ca, mtls.keystore, "endpoint-mtls-sighup")
    assert tls.reload()
    assert _served_serial(mtls) == _serial_on_disk(mtls.keystore)
