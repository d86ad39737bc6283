"""Per-principal limits on the Kafka endpoint: connections (one more is closed after its login)
and fetched bytes per second (Fetch answers carry throttle_time_ms; other principals unaffected)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.security.conftest import PASSWORDS, Secured, own_endpoint
from tests.security.test_endpoint_sasl import _closed, _fetch, _frame, _plain_login, _response, _tls

pytestmark = [pytest.mark.security, pytest.mark.kafka]
RATE = 64 * 1024


@pytest.fixture(scope="module")
def limited(secured: Secured) -> Iterator[Secured]:
    security = {"connections_per_principal": 2, "read_bytes_per_second_per_principal": RATE}
    with own_endpoint(secured, "limits", security) as limited:
        yield limited


def test_connections_per_principal(limited: Secured) -> None:
    first, second = _tls(limited), _tls(limited)
    try:
        for s in (first, second):
            assert _plain_login(s, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
        with _tls(limited) as third:  # over the limit: closed after the login
            third.sendall(_frame(17, 1, 2, load_request_schema(17, 1)(mechanism="PLAIN")))
            _response(third, 17, 1)
            third.sendall(
                _frame(
                    36,
                    2,
                    3,
                    load_request_schema(36, 2)(auth_bytes=b"\0bob\0" + PASSWORDS["bob"].encode()),
                )
            )
            assert _closed(third)
        with _tls(limited) as other:  # another principal is not affected
            assert _plain_login(other, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
    finally:
        first.close()
    with _tls(limited) as again:  # a slot freed by a closed connection is reused
        assert _plain_login(again, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
    second.close()


def test_read_rate_per_principal_throttles_only_that_principal(limited: Secured) -> None:
    a = limited.topics["A"]
    with _tls(limited) as s:
        assert _plain_login(s, "bob", PASSWORDS["bob"]).error_code == ErrorCode.none
        s.sendall(_frame(1, 12, 4, _fetch({a: 0})))
        resp = _response(s, 1, 12)
        size = len(resp.responses[0].partitions[0].records)
        assert size > 2 * RATE  # more than the burst: the answer says to back off
        assert resp.throttle_time.total_seconds() > 0
    with _tls(limited) as s:
        assert _plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        s.sendall(_frame(1, 12, 4, _fetch({a: 0}, max_bytes=RATE // 2)))
        resp = _response(s, 1, 12)
        assert resp.responses[0].partitions[0].records
        assert resp.throttle_time.total_seconds() == 0
