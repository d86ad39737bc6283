"""Fetch sessions (KIP-227) against hostile clients, on raw frames over SASL_SSL.

A session id is worth nothing outside the connection and principal that got it; every partition
a session holds is checked against the principal's READ on every Fetch, so a revoked ACL ends an
open session's reads within the authorization cache time; the session cache is bounded and
evicts as Kafka's ``FetchSessionCache`` does (fetcher/kafka/fetch_sessions.py).
"""

from __future__ import annotations

import contextlib
import datetime
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher.kafka import EndpointThread, ListenerSettings
from tests.daemon.helpers import wait_for
from tests.fixtures.acls import ReadAcl
from tests.security.conftest import AUTHZ_CACHE_MS, PASSWORDS, Secured
from tests.security.frames import frame, plain_login, response, tls

pytestmark = [pytest.mark.security, pytest.mark.kafka]

_PART_BYTES = 2048  # one small batch per answer: enough to see records, little to move


class _Client:
    """One logged-in raw connection that numbers its requests."""

    def __init__(self, s: socket.socket, user: str) -> None:
        self.s = s
        self.corr = 10
        assert plain_login(s, user, PASSWORDS[user]).error_code == ErrorCode.none

    def fetch(self, session_id: int, epoch: int, topics: dict[str, int] | None = None) -> Any:
        """Fetch v12 of partition 0 of each topic at its offset (none: an incremental fetch that
        names nothing)."""
        cls: Any = load_request_schema(1, 12)
        mod = __import__(cls.__module__, fromlist=["FetchTopic"])
        body = cls(
            # long enough for a cold remote read on a loaded machine (min_bytes=1 answers as soon
            # as records are there; an answer expected empty waits this long)
            max_wait=datetime.timedelta(milliseconds=2000),
            min_bytes=1,
            session_id=session_id,
            session_epoch=epoch,
            topics=tuple(
                mod.FetchTopic(
                    topic=t,
                    partitions=(
                        mod.FetchPartition(partition=0, fetch_offset=o, partition_max_bytes=_PART_BYTES),
                    ),
                )
                for t, o in (topics or {}).items()
            ),
            forgotten_topics_data=(),
        )
        self.corr += 1
        self.s.sendall(frame(1, 12, self.corr, body))
        return response(self.s, 1, 12)


@contextlib.contextmanager
def _client(secured: Secured, user: str, port: int | None = None) -> Iterator[_Client]:
    with tls(secured, port=port) as s:
        yield _Client(s, user)


def _record_bytes(resp: Any) -> int:
    return sum(len(p.records or b"") for t in resp.responses for p in t.partitions)


def _errors(resp: Any) -> dict[str, ErrorCode]:
    return {str(t.topic): p.error_code for t in resp.responses for p in t.partitions}


def _open_session(c: _Client, topic: str) -> int:
    first = c.fetch(0, 0, {topic: 0})
    assert first.error_code == ErrorCode.none and first.session_id != 0
    assert _errors(first) == {topic: ErrorCode.none} and _record_bytes(first) > 0
    return int(first.session_id)


def test_another_principal_cannot_use_or_close_a_session(secured: Secured) -> None:
    """The issue's attack: alice (no READ on B) replays bob's session id with no topics."""
    b = secured.topics["B"]
    with _client(secured, "bob") as bob, _client(secured, "alice") as alice:
        sid = _open_session(bob, b)
        stolen = alice.fetch(sid, 1, None)
        assert stolen.error_code == ErrorCode.fetch_session_id_not_found
        assert stolen.responses == () and _record_bytes(stolen) == 0
        # a full request naming bob's id (which closes that session on a broker) closes nothing
        # of bob's: alice gets her own answer, B refused
        full = alice.fetch(sid, -1, {b: 0})
        assert full.session_id == 0 and _errors(full) == {b: ErrorCode.topic_authorization_failed}
        assert _record_bytes(full) == 0
        still = bob.fetch(sid, 1, None)
        assert still.error_code == ErrorCode.none and still.session_id == sid
        assert _record_bytes(still) > 0


def test_a_session_id_is_unknown_on_another_connection_of_the_same_principal(secured: Secured) -> None:
    b = secured.topics["B"]
    with _client(secured, "bob") as first, _client(secured, "bob") as second:
        sid = _open_session(first, b)
        other = second.fetch(sid, 1, None)
        assert other.error_code == ErrorCode.fetch_session_id_not_found and _record_bytes(other) == 0
        assert first.fetch(sid, 1, None).error_code == ErrorCode.none  # the owner's epoch did not move


def test_sessions_go_with_their_connection(secured: Secured) -> None:
    cache = secured.endpoint.endpoint.ctx.fetch_sessions
    with _client(secured, "bob") as keep:
        _open_session(keep, secured.topics["A"])
        before = len(cache)
        with _client(secured, "bob") as gone:
            for _ in range(3):
                _open_session(gone, secured.topics["B"])  # id 0, epoch 0: a new session each time
            assert len(cache) == before + 3
        wait_for("the closed connection's sessions removed", lambda: len(cache) == before, timeout=30)


def test_a_revoked_acl_ends_an_open_session(secured: Secured) -> None:
    """carol gets READ on B, opens a session on it, loses READ: her incremental fetches, which
    name no topic, stop carrying B's records within the authorization cache time."""
    b = secured.topics["B"]
    with ReadAcl(secured.kafka, "User:carol", b) as acl, _client(secured, "carol") as carol:
        opened: list[Any] = []

        def session_on_b() -> bool:  # the endpoint may still hold carol's ACLs from before
            resp = carol.fetch(0, 0, {b: 0})
            opened.append(resp)
            return _errors(resp) == {b: ErrorCode.none} and _record_bytes(resp) > 0

        wait_for("carol's new READ on B seen by the endpoint", session_on_b, timeout=60)
        sid, epoch = int(opened[-1].session_id), 1
        assert sid != 0
        assert _record_bytes(carol.fetch(sid, epoch, None)) > 0  # the session serves B
        acl.revoke()
        last: list[Any] = []

        def refused() -> bool:
            nonlocal epoch
            epoch += 1
            resp = carol.fetch(sid, epoch, None)
            assert resp.error_code == ErrorCode.none and resp.session_id == sid
            last.append(resp)
            return _errors(resp) == {b: ErrorCode.topic_authorization_failed}

        # bounded: the broker applies the deletion, then the endpoint's cache
        # (AUTHZ_CACHE_MS) expires; until then the session still reads
        wait_for("the open session refused B", refused, timeout=30 + AUTHZ_CACHE_MS / 1000)
        assert _record_bytes(last[-1]) == 0
        epoch += 1
        again = carol.fetch(sid, epoch, None)
        assert _errors(again) == {b: ErrorCode.topic_authorization_failed} and _record_bytes(again) == 0


def _small_cache(secured: Secured, name: str, eviction_ms: int) -> EndpointThread:
    """A second listener over the suite's read core with room for two sessions."""
    settings = ListenerSettings(
        port=0, merged=False, fetch_session_slots=2, fetch_session_eviction_ms=eviction_ms
    )
    return EndpointThread(secured.fetcher, settings, secured.tmp / name)


def test_a_full_cache_keeps_sessions_in_use(secured: Secured) -> None:
    """Kafka's rule with the default eviction time: a new session evicts none that is recent, so
    a burst of new sessions cannot push out the ones clients use; it is answered session-less."""
    a, b = secured.topics["A"], secured.topics["B"]
    with _small_cache(secured, "sessions-kept", 120_000) as ep, _client(secured, "bob", ep.port) as c:
        s1, s2 = _open_session(c, a), _open_session(c, b)
        burst = c.fetch(0, 0, {a: 0})
        assert burst.error_code == ErrorCode.none and burst.session_id == 0  # no slot: session-less
        assert _record_bytes(burst) > 0
        assert c.fetch(s1, 1, None).error_code == ErrorCode.none
        assert c.fetch(s2, 1, None).error_code == ErrorCode.none
        assert ep.endpoint.ctx.fetch_sessions.evictions == 0


def test_a_full_cache_evicts_the_least_recently_used_idle_session(secured: Secured) -> None:
    """With an eviction time of 0 every session is idle long enough: the least recently used one
    makes room (FETCH_SESSION_ID_NOT_FOUND for it afterwards); the one in use stays."""
    a, b = secured.topics["A"], secured.topics["B"]
    with _small_cache(secured, "sessions-evicted", 0) as ep, _client(secured, "bob", ep.port) as c:
        s1, s2 = _open_session(c, a), _open_session(c, b)
        assert c.fetch(s1, 1, None).error_code == ErrorCode.none  # s2 is now the least recently used
        s3 = _open_session(c, a)
        assert s3 not in (0, s1, s2)
        assert c.fetch(s2, 1, None).error_code == ErrorCode.fetch_session_id_not_found
        assert c.fetch(s1, 2, None).error_code == ErrorCode.none
        assert c.fetch(s3, 1, None).error_code == ErrorCode.none
        assert ep.endpoint.ctx.fetch_sessions.evictions == 1


def _small_cache_of(secured: Secured, name: str, slots: int) -> EndpointThread:
    settings = ListenerSettings(port=0, merged=False, fetch_session_slots=slots)
    return EndpointThread(secured.fetcher, settings, secured.tmp / name)


def test_a_client_opening_sessions_beyond_the_cap_takes_no_other_clients_session(secured: Secured) -> None:
    """bob opens a session; carol then asks for new sessions over and over (each a full fetch with
    epoch 0), on one connection after another. The cache never holds more than its slots; once
    they are taken her new sessions are refused the way Kafka refuses them (answered
    session-less: session id 0, the records still served), a bigger one too, and bob's session,
    in use and younger than the eviction time, is never evicted for hers (her sessions go when
    her connection does, which frees their slots for the next)."""
    a, b = secured.topics["A"], secured.topics["B"]
    slots = 3
    with _small_cache_of(secured, "sessions-capped", slots) as ep, _client(secured, "bob", ep.port) as bob:
        cache = ep.endpoint.ctx.fetch_sessions
        sid = _open_session(bob, a)
        epoch = 1
        for n in range(4):
            with _client(secured, "carol", ep.port) as carol:
                got = []
                for _ in range(5):
                    resp = carol.fetch(0, 0, {a: 0})
                    assert resp.error_code == ErrorCode.none and _record_bytes(resp) > 0
                    got.append(int(resp.session_id))
                    assert len(cache) <= slots
                assert sum(1 for s in got if s) == slots - 1 and got[-1] == 0, got
                # more partitions than bob's session (B refused to her, but named): no eviction
                assert carol.fetch(0, 0, {a: 0, b: 0}).session_id == 0
            check = bob.fetch(sid, epoch, None)
            assert check.error_code == ErrorCode.none and check.session_id == sid, n
            epoch += 1
        assert cache.evictions == 0
