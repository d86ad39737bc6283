"""Incremental fetch sessions (KIP-227) on the wire: a session is created, its incremental
requests carry only what changed, its answers only partitions with news; bad ids and epochs get
Kafka's errors. (Java's consumer uses sessions in ``test_clients.py``'s console-consumer tests.)"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

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
