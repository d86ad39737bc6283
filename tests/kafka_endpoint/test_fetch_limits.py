"""Client-sent Fetch limits are capped as a broker caps them: a client asking for a gigabyte per
partition gets at most ``max_partition_fetch_bytes`` of a partition and ``fetch_max_bytes`` in all
(the first batch whole), so one request cannot make the reader fetch a whole segment.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.log.records import iter_batches
from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _frame, _response

PART_CAP = 8 * 1024
TOTAL_CAP = 12 * 1024
HUGE = 1 << 30


@pytest.fixture(scope="module")
def capped(served: Served) -> Iterator[EndpointThread]:
    settings = ListenerSettings(port=0, fetch_max_bytes=TOTAL_CAP, max_partition_fetch_bytes=PART_CAP)
    with EndpointThread(served.fetcher, settings, served.work / "capped-state") as ep:
        yield ep


def _fetch(port: int, partitions: tuple[int, ...], offset: int = 0) -> list[Any]:
    """One Fetch v12 asking for 1 GiB per partition and in all; the partitions' answers."""
    fetch = load_request_schema(1, 12)
    mod = __import__(fetch.__module__, fromlist=["x"])
    parts = tuple(
        mod.FetchPartition(
            partition=p,
            fetch_offset=offset,
            partition_max_bytes=HUGE,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        for p in partitions
    )
    req = fetch(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=HUGE,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=TOPIC, partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_frame(1, 12, 1, req))
        _, body = _response(s, 1, 12)
    return list(body.responses[0].partitions)


def _sizes(p: Any) -> list[int]:
    assert p.error_code is ErrorCode.none
    return [h.size for h in iter_batches(bytes(p.records or b""))]


def test_partition_max_bytes_is_capped(served: Served, capped: EndpointThread) -> None:
    (p,) = _fetch(capped.port, (0,))
    sizes = _sizes(p)
    assert len(sizes) > 1 and sum(sizes) <= PART_CAP  # several whole batches, no more than the cap
    assert sum(sizes) + max(sizes) > PART_CAP  # and as many as fit
    (uncapped,) = _fetch(served.endpoint.port, (0,))  # the default caps are far above this data
    assert sum(_sizes(uncapped)) > 4 * PART_CAP  # a whole 64 KiB segment


def test_fetch_max_bytes_is_capped(capped: EndpointThread) -> None:
    got = _fetch(capped.port, (0, 1))
    total = sum(sum(_sizes(p)) for p in got)
    assert 0 < total <= TOTAL_CAP
    assert all(sum(_sizes(p)) <= PART_CAP for p in got)


def test_caps_are_configurable_with_kafka_names() -> None:
    cfg = load_config(None, **{"fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 1 << 16})
    s = ListenerSettings.from_read_config(cfg.read)
    assert (s.fetch_max_bytes, s.max_partition_fetch_bytes) == (1 << 20, 1 << 16)
    d = ListenerSettings.from_read_config(load_config(None).read)
    assert (d.fetch_max_bytes, d.max_partition_fetch_bytes) == (57_671_680, 16 << 20)
