"""A reconnect storm from one address, against the Kafka endpoint over real sockets (SASL_SSL).

Admission comes before TLS (fetcher/kafka/server.py): a connection over its address's creation
rate (``connection_creation_rate_per_ip``, KIP-612's per-IP quota) is refused on accept with no
TLS handshake done, and the quota is per address, so a client on another loopback address
connects, logs in and reads while the storm goes on. The endpoint's own counters say how many
handshakes it started: one per admitted connection, none for a refused one.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka import ListenerSettings
from tests.daemon.helpers import wait_for
from tests.security.conftest import PASSWORDS, Secured, own_endpoint, read_range
from tests.security.frames import authenticate, handshake
from tests.security.test_sasl_attacks import plain, tls_from, topics_seen

pytestmark = [pytest.mark.security, pytest.mark.kafka]

RATE = 1.0  # new connections per second per address
BURST = 10  # the rate's ten seconds' worth
STORM = 200  # connections opened at once from the attacker's address
ATTACKER = "127.0.4.1"
CLIENT = "127.0.0.2"


@pytest.fixture(scope="module")
def stormed(secured: Secured) -> Iterator[Secured]:
    settings = ListenerSettings(port=0, merged=False, connection_creation_rate_per_ip=RATE)
    with own_endpoint(secured, "storm", settings=settings) as stormed:
        yield stormed


def test_a_reconnect_storm_is_refused_before_tls_and_another_address_still_reads(stormed: Secured) -> None:
    ep = stormed.endpoint.endpoint
    port = stormed.endpoint.port
    storm: list[socket.socket] = []
    try:
        for _ in range(STORM):  # plain TCP: the kernel completes each connect, the endpoint decides
            storm.append(
                socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(ATTACKER, 0))
            )
        wait_for(
            "every storm connection admitted or refused",
            lambda: ep.stats["accepted"] + ep.stats["refused:connection_creation_rate"] >= STORM,
            timeout=60,
        )
        refused = ep.stats["refused:connection_creation_rate"]
        # the burst and what the rate gave back while the storm was accepted; the rest refused
        assert refused >= STORM - BURST - 20, dict(ep.stats)
        # a TLS handshake was started for each admitted connection only
        assert ep.stats["tls_handshakes"] == ep.stats["accepted"] <= STORM - refused

        # meanwhile a client on another address: TLS, login, Metadata, and a whole read
        with tls_from(stormed.ca.path, port, CLIENT) as s:
            assert handshake(s, "PLAIN").error_code == ErrorCode.none
            assert authenticate(s, plain("bob", PASSWORDS["bob"])).error_code == ErrorCode.none
            assert stormed.topics["B"] in topics_seen(s, 5)
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": PASSWORDS["bob"],
            "ssl.ca.location": str(stormed.ca.path),
        }  # librdkafka connects from 127.0.0.1: another address than the attacker's too
        b = stormed.topics["B"]
        assert read_range(conf, b, stormed.remote_end["B"]) == stormed.before["B"]

        # the attacker's address is still over its rate: a TLS client from it is refused at once
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            tls_from(stormed.ca.path, port, ATTACKER).close()
    finally:
        for s in storm:
            with contextlib.suppress(OSError):
                s.close()
