"""A failed read-ahead is not an answer: the next Fetch reads again.

After serving a partition up to offset N the endpoint reads from N at once (read-ahead). Here
that read hits a storage fault (the project's fault-injecting wrapper around the real local
plugin); the fault is then cleared, and the Fetch that asks for N must get the records, not the
read-ahead's stale KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import ReadConfig
from rlm.errors import RemoteStorageError
from rlm.log.records import iter_batches
from rsm_plugins.faults import FaultInjectingRSM
from tests.daemon.helpers import wait_for
from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _frame, _response

SIZE = 64 * 1024


def _fetch(port: int, offset: int) -> Any:
    fetch = load_request_schema(1, 12)
    mod = __import__(fetch.__module__, fromlist=["x"])
    part = mod.FetchPartition(
        partition=0,
        fetch_offset=offset,
        partition_max_bytes=SIZE,
        current_leader_epoch=-1,
        last_fetched_epoch=-1,
        log_start_offset=-1,
    )
    req = fetch(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=SIZE,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=TOPIC, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_frame(1, 12, 1, req))
        _, body = _response(s, 1, 12)
    return body.responses[0].partitions[0]


def test_failed_read_ahead_is_read_again(served: Served) -> None:
    rsm = FaultInjectingRSM(served.fetcher.rsm)
    # a chunk cache without read-ahead of its own: the first segment is warmed by fetches through
    # the chunk cache (a scan reads into its own buffers, not the cache), so the endpoint's first
    # Fetch needs no GET and the only GET under the fault is the endpoint's read-ahead
    read = ReadConfig.model_validate({"read_ahead_chunks": 0})
    with RemoteFetcher(rsm, served.fetcher.rlmm, work_dir=served.work / "read-ahead", read=read) as f:
        plan = f.plan(TOPIC, 0)
        first = plan.segments[0]
        second = plan.after(first)
        assert second is not None
        at = first.first
        while at <= first.last:  # the fetches the endpoint's will find in the cache
            got = f.fetch(TOPIC, 0, at, max_bytes=SIZE, sequential=True)
            at = max(at + 1, got.next_offset)
        gets = rsm.count("fetch_log_segment")
        rsm.fail_next("fetch_log_segment", RemoteStorageError("injected: storage down", retriable=True))
        with EndpointThread(f, ListenerSettings(port=0, merged=False), served.work / "read-ahead-ep") as ep:
            last_batch = _fetch(ep.port, first.last)  # from the cache; read-ahead of the next segment
            assert last_batch.error_code is ErrorCode.none  # so the fault is left for the read-ahead
            wait_for("read-ahead failed", lambda: rsm.count("fetch_log_segment", failed=True) == 1)
            rsm.clear_faults()  # storage is back
            p = _fetch(ep.port, second.first)
    assert p.error_code is ErrorCode.none
    bases = [h.base_offset for h in iter_batches(bytes(p.records or b""))]
    assert bases and bases[0] == second.first
    assert rsm.count("fetch_log_segment", failed=False) > gets  # read again, from storage
