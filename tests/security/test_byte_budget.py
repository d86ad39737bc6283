"""The listener's budget of request bytes (``queued_max_request_bytes``, Kafka's
``queued.max.request.bytes``) alone bounds what a flood of half-sent frames makes it hold.

Many connections that never log in each send a size prefix just under the pre-login cap
(``sasl_max_receive_size``, 512 KiB, so the frame cap does not close them) and all of the request
but its last byte, then stall; the login deadline is a minute, so nothing else closes them
during the test. The endpoint reads only as many of those requests as fit in the budget's share
for connections not logged in; the others wait unread (their bytes stay in the kernel, TCP
pushes back), and a client logged in before the flood is served meanwhile from the other half.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from fetcher.kafka import ListenerSettings
from tests.daemon.helpers import wait_for
from tests.security.conftest import PASSWORDS, Secured, own_endpoint
from tests.security.frames import authenticate, handshake
from tests.security.test_sasl_attacks import plain, tls_from, topics_seen

pytestmark = [pytest.mark.security, pytest.mark.kafka]

BUDGET = 4 * 1024 * 1024
SIZE = 500_000  # under the 524,288 bytes a connection may send before login
FLOOD = 40  # 20 MB of requests if the endpoint read them all
SOURCES = [f"127.0.6.{i}" for i in range(1, 9)]
# what a waiting TLS connection's stream reader may hold: its pause mark (twice the endpoint's
# 64 KiB limit), then the whole of one socket read (asyncio's selector transport reads at most
# 256 KiB) and a TLS record (16 KiB and its overhead) decrypted in the same call
PER_WAITING = 2 * 64 * 1024 + 256 * 1024 + 17 * 1024


@pytest.fixture(scope="module")
def budgeted(secured: Secured) -> Iterator[Secured]:
    settings = ListenerSettings(
        port=0, merged=False, queued_max_request_bytes=BUDGET, login_timeout_ms=60_000
    )
    with own_endpoint(secured, "budget", settings=settings) as budgeted:
        yield budgeted


def _stall(s: ssl.SSLSocket) -> None:
    """A request's size prefix and all of it but the last byte (blocks while the server does not
    read: the flood's sender threads wait there, as an attacker's would)."""
    with contextlib.suppress(OSError):
        s.sendall(struct.pack(">i", SIZE) + b"\0" * (SIZE - 1))


def test_half_sent_frames_are_held_within_the_budget_and_logged_in_clients_are_served(
    budgeted: Secured,
) -> None:
    ep = budgeted.endpoint.endpoint
    port, ca = budgeted.endpoint.port, budgeted.ca.path
    before = tls_from(ca, port, "127.0.0.1", timeout=10)  # a stalled answer fails the test in 10 s
    flood: list[ssl.SSLSocket] = []
    senders: list[threading.Thread] = []
    try:
        assert handshake(before, "PLAIN").error_code == ErrorCode.none
        assert authenticate(before, plain("bob", PASSWORDS["bob"])).error_code == ErrorCode.none
        for i in range(FLOOD):
            s = tls_from(ca, port, SOURCES[i % len(SOURCES)])
            flood.append(s)
            t = threading.Thread(target=_stall, args=(s,), daemon=True)
            t.start()
            senders.append(t)
        share = ep.budget.prelogin
        assert share is not None
        fit = share.limit // SIZE  # requests of the flood the share holds at once
        wait_for("the flood's requests read or waiting", lambda: ep.budget.waiting >= FLOOD - fit, timeout=60)
        # the bytes the endpoint took on to read stay within the share, whatever the flood sent
        assert share.used <= share.limit and ep.budget.used <= BUDGET // 2
        # and what it holds in memory: the requests it reads plus, per waiting connection, what
        # came in before its stream reader paused: under its pause mark (2 x 64 KiB) and then one
        # socket read decrypted whole (asyncio reads at most 256 KiB, plus a TLS record left over)
        held = ep.buffered_bytes()
        assert held <= BUDGET // 2 + FLOOD * PER_WAITING, held
        assert held < FLOOD * SIZE * 17 // 20, held  # the rest stays in the kernel, unread

        # the client logged in before the flood is answered at once from the other half
        assert budgeted.topics["B"] in topics_seen(before, 5)
        assert budgeted.topics["A"] in topics_seen(before, 6)
    finally:
        before.close()
        for s in flood:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in senders:
            t.join(30)
    # the flood gone, its bytes go back
    wait_for("the budget empty again", lambda: ep.budget.used == 0 and ep.budget.waiting == 0, timeout=30)
