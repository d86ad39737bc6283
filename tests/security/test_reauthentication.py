"""KIP-368 re-authentication with a real client: the endpoint announces a short session lifetime
(``connections.max.reauth.ms``), librdkafka re-authenticates on the same connection while it
reads, record for record, and a connection that lets its session lapse is closed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.security.conftest import PASSWORDS, Secured, own_endpoint
from tests.security.frames import closed, frame, metadata, plain_login, response, tls

pytestmark = [pytest.mark.security, pytest.mark.kafka]
LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def short_sessions(secured: Secured) -> Iterator[Secured]:
    with own_endpoint(secured, "reauth", {"connections.max.reauth.ms": LIFETIME_MS}) as short:
        yield short


def test_librdkafka_reads_across_reauthentications(
    short_sessions: Secured, capfd: pytest.CaptureFixture[str]
) -> None:
    """bob reads A again and again for several session lifetimes: every record as the broker had
    it, no consumer error, and the endpoint saw re-authentications (not new connections)."""
    s = short_sessions
    a, end = s.topics["A"], s.remote_end["A"]
    c = Consumer(
        {
            **s.client("bob"),
            "group.id": f"bob-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 64 * 1024,  # many small fetches: requests keep flowing
        }
    )
    reauths = rounds = 0
    log = ""
    try:
        c.assign([TopicPartition(a, 0, 0)])
        got: list[tuple[int, bytes | None, bytes | None]] = []
        give_up = time.monotonic() + 20  # only so a broken endpoint fails instead of hanging
        while reauths < 3 and time.monotonic() < give_up:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, f"consumer error: {m.error()}"
                if m.offset() < end:
                    got.append((m.offset(), m.key(), m.value()))
                if m.offset() >= end - 1:  # one pass done: compare it, then read again from 0
                    assert got == s.before["A"]
                    got, rounds = [], rounds + 1
                    c.seek(TopicPartition(a, 0, 0))
            out, err = capfd.readouterr()
            log += out + err
            reauths = sum(
                1
                for line in log.splitlines()
                if "kafka_sasl_authenticated" in line
                and "User:bob" in line
                and "reauthentication=True" in line
            )
        assert got == s.before["A"][: len(got)]
    finally:
        c.close()
    assert reauths >= 3, f"{reauths} re-authentications seen"
    assert rounds >= 1
    assert f"session_lifetime_ms={LIFETIME_MS}" in log
    assert "kafka_sasl_session_expired" not in log


def test_a_session_not_renewed_is_closed(short_sessions: Secured) -> None:
    with tls(short_sessions) as sock:
        resp = plain_login(sock, "alice", PASSWORDS["alice"])
        assert resp.error_code == ErrorCode.none
        assert resp.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        answered = 0
        give_up = time.monotonic() + 15  # only so a broken endpoint fails instead of hanging
        while time.monotonic() < give_up:
            sock.sendall(frame(3, 12, 10 + answered, metadata()))
            try:
                response(sock, 3, 12)
            except (ConnectionError, OSError):
                break
            answered += 1
            time.sleep(0.2)  # the client's pace: one request every 200 ms
        else:
            raise AssertionError("the connection outlived its session")
        assert answered >= 1  # served while the session was valid
        assert closed(sock)
