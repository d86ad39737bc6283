"""Incremental fetch sessions (KIP-227) on the wire: a session is created, its incremental
requests carry only what changed, its answers only partitions with news; bad ids and epochs get
Kafka's errors; a session is its connection's alone. The cache's eviction rule with a clock of its
own. (Java's consumer uses sessions in ``test_clients.py``'s console-consumer tests; the attacks
with SASL principals are in ``tests/security/test_fetch_session_attacks.py``.)"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from fetcher.kafka.fetch_sessions import FetchSessionCache, SessionPartition
from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _connect
from tests.kafka_endpoint.test_groups import _call


def _fetch(s: Any, corr: int, session_id: int, epoch: int, parts: dict[int, int],
           forgotten: tuple[int, ...] = ()) -> Any:
    return _call(
        s, 1, 12, corr, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=lambda m: (m.FetchTopic(topic=TOPIC, partitions=tuple(
            m.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=4096) for p, o in parts.items())),)
        if parts else (),
        forgotten_topics_data=lambda m: (m.ForgottenTopic(topic=TOPIC, partitions=forgotten),)
        if forgotten else (),
        rack_id="",
    )


def _parts(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


def test_incremental_fetch_session(served: Served) -> None:
    end1 = served.expected.log_end[1]
    with _connect(served.endpoint.port) as s:
        full = _fetch(s, 1, 0, 0, {0: 0, 1: end1})  # partition 1 at its end: nothing to read
        assert full.error_code == ErrorCode.none and full.session_id != 0
        got = _parts(full)
        assert set(got) == {0, 1} and got[0].records and not got[1].records
        sid = full.session_id
        # epoch 1: only partition 0 moved on; partition 1 has no news, so it is left out
        inc = _fetch(s, 2, sid, 1, {0: 10})
        assert inc.error_code == ErrorCode.none and inc.session_id == sid
        assert set(_parts(inc)) == {0} and _parts(inc)[0].records
        # nothing in the request: partition 0 (still at 10) is read again; 1 still left out
        assert set(_parts(_fetch(s, 3, sid, 2, {}))) == {0}
        # forget partition 0: nothing with news remains
        assert _parts(_fetch(s, 4, sid, 3, {}, forgotten=(0,))) == {}
        # a replayed or skipped epoch, an unknown session
        assert _fetch(s, 5, sid, 3, {}).error_code == ErrorCode.invalid_fetch_session_epoch
        assert _fetch(s, 6, sid, 9, {}).error_code == ErrorCode.invalid_fetch_session_epoch
        assert _fetch(s, 7, sid + 1, 1, {}).error_code == ErrorCode.fetch_session_id_not_found
        # epoch -1 closes it: a session-less full fetch; the old id is gone
        closed = _fetch(s, 8, sid, -1, {0: 0})
        assert closed.session_id == 0 and set(_parts(closed)) == {0}
        assert _fetch(s, 9, sid, 4, {}).error_code == ErrorCode.fetch_session_id_not_found
        # session-less as librdkafka sends it: id 0, epoch -1
        plain = _fetch(s, 10, 0, -1, {1: 0})
        assert plain.session_id == 0 and _parts(plain)[1].records


def test_a_session_belongs_to_its_connection(served: Served) -> None:
    """Without SASL too: another connection cannot continue, close or read a session by its id."""
    with _connect(served.endpoint.port) as owner, _connect(served.endpoint.port) as other:
        sid = _fetch(owner, 1, 0, 0, {0: 0}).session_id
        assert sid != 0
        assert _fetch(other, 1, sid, 1, {}).error_code == ErrorCode.fetch_session_id_not_found
        assert _fetch(other, 2, sid, -1, {1: 0}).session_id == 0  # a full fetch; closes nothing of owner's
        inc = _fetch(owner, 2, sid, 1, {})
        assert inc.error_code == ErrorCode.none and _parts(inc)[0].records


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(cache: FetchSessionCache, owner: object, partitions: int) -> Any:
    s = cache.new(owner, "User:u", partitions)
    assert s is not None
    for p in range(partitions):
        s.parts[(TOPIC, p)] = SessionPartition(0, 1024, -1)
    return s


def test_eviction_follows_kafkas_rule() -> None:
    """Kafka's FetchSessionCache order: a stale least-recently-used session first; else the one
    with fewest partitions among those older than the eviction time, for a new one with more
    partitions (a tie does not evict); else no session. Never a session younger than the
    eviction time for a bigger one."""
    clock, conn = _Clock(), object()
    cache = FetchSessionCache(slots=2, eviction_s=120, clock=clock)
    small, big = _session(cache, conn, 1), _session(cache, conn, 5)
    assert cache.new(conn, "User:u", 50) is None  # both recent: nothing evicted, session-less
    clock.now += 100
    assert cache.get(small.session_id, conn, "User:u") is small  # used: big is least recently used
    clock.now += 30  # big idle 130 s > 120 s: stale, evicted first although bigger
    third = _session(cache, conn, 2)
    assert cache.get(big.session_id, conn, "User:u") is None and cache.evictions == 1
    # none stale now; small is older than 120 s, third is not: a new session with more partitions
    # than small's one evicts small, one with as many or fewer does not
    clock.now += 1
    assert cache.new(conn, "User:u", 0) is None
    assert cache.new(conn, "User:u", 1) is None
    fourth = cache.new(conn, "User:u", 2)
    assert fourth is not None and cache.get(small.session_id, conn, "User:u") is None
    assert cache.get(third.session_id, conn, "User:u") is third and cache.evictions == 2
    assert FetchSessionCache(slots=0).new(conn, None, 1) is None


def test_sessions_are_their_owners() -> None:
    clock, a, b = _Clock(), object(), object()
    cache = FetchSessionCache(slots=10, clock=clock)
    s = _session(cache, a, 1)
    assert 0 < s.session_id <= 0x7FFFFFFF
    assert cache.get(s.session_id, b, "User:u") is None  # another connection
    assert cache.get(s.session_id, a, "User:v") is None  # another principal on it
    assert cache.foreign(s.session_id, b, "User:u") and not cache.foreign(s.session_id, a, "User:u")
    cache.close(s.session_id, b, "User:u")
    assert cache.get(s.session_id, a, "User:u") is s  # not closed by another owner
    _session(cache, a, 1)
    _session(cache, b, 1)
    assert cache.close_connection(a) == 2 and len(cache) == 1
    assert cache.get(s.session_id, a, "User:u") is None
