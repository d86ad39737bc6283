"""The endpoint runs on either event loop (``read.kafka_event_loop``), with the same answers.

uvloop is the default when installed (its transports, TLS included, are compiled); the standard
library's loop stays supported for installs without it. Both serve a confluent-kafka consumer
every record of both isolation levels, with sequential (chunk cache) and exact-range reads.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from confluent_kafka import Consumer, TopicPartition

from fetcher.kafka import EndpointThread, ListenerSettings
from fetcher.kafka.runner import new_event_loop
from tests.kafka_endpoint.conftest import PARTITIONS, TOPIC, Served
from tests.kafka_endpoint.test_clients import _conf, _consume, _expected


@pytest.mark.parametrize(("loop", "sequential"), [("asyncio", False), ("uvloop", True), ("asyncio", True)])
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_both_loops_serve_every_record(served: Served, loop: str, sequential: bool, isolation: str) -> None:
    settings = ListenerSettings(port=0, merged=False, event_loop=loop, sequential_reads=sequential)
    with EndpointThread(served.fetcher, settings, served.work / f"loop-{loop}-{sequential}") as ep:
        kind = type(ep._loop)
        c = Consumer({**_conf(served, isolation), "bootstrap.servers": ep.bootstrap,
                      "max.partition.fetch.bytes": 4096})  # many Fetches, each a few batches
        try:
            c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            got = _consume(c, _expected(served, isolation))
        finally:
            c.close()
    assert got == _expected(served, isolation)
    assert issubclass(kind, uvloop.Loop) == (loop == "uvloop")


def test_auto_is_uvloop_when_installed() -> None:
    loop = new_event_loop("auto")
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    plain = new_event_loop("asyncio")
    try:
        assert isinstance(plain, asyncio.BaseEventLoop) and not isinstance(plain, uvloop.Loop)
    finally:
        plain.close()
