"""OffsetFetch under the topics' ACLs: the endpoint answers what the SASL_SSL broker answers.

bob (READ on A, B and every group) commits offsets of A and B for a group ``alice-…`` on the
endpoint and on the broker; alice (READ on A and on ``alice-`` groups) then asks for them on both
with the same raw requests. The broker's answer is the reference: topics named in the request
that alice may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED, and when all the group's offsets
are asked they are left out.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.security.conftest import PASSWORDS, Secured
from tests.security.frames import frame, plain_login, response, tls

pytestmark = [pytest.mark.security, pytest.mark.kafka]


def _commit(conf: dict[str, str], group: str, offsets: dict[str, int]) -> None:
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    try:
        done = c.commit(offsets=[TopicPartition(t, 0, o) for t, o in offsets.items()], asynchronous=False)
        assert done is not None and all(tp.error is None for tp in done)
    finally:
        c.close()


def _request(version: int, group: str, topics: list[str] | None) -> Any:
    cls = load_request_schema(9, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    if version >= 8:
        g = mod.OffsetFetchRequestGroup(
            group_id=group,
            topics=None
            if topics is None
            else tuple(mod.OffsetFetchRequestTopics(name=t, partition_indexes=(0,)) for t in topics),
        )
        return cls(groups=(g,), require_stable=False)
    return cls(
        group_id=group,
        topics=None
        if topics is None
        else tuple(mod.OffsetFetchRequestTopic(name=t, partition_indexes=(0,)) for t in topics),
        require_stable=False,
    )


def _ask(secured: Secured, port: int, version: int, group: str, topics: list[str] | None) -> Any:
    """alice's OffsetFetch on ``port``: (group error, {topic: (offset, metadata, error)})."""
    with tls(secured, port=port) as s:
        assert plain_login(s, "alice", PASSWORDS["alice"]).error_code == ErrorCode.none
        s.sendall(frame(9, version, 7, _request(version, group, topics)))
        resp = response(s, 9, version)
    g = resp.groups[0] if version >= 8 else resp
    parts = {
        t.name: [
            (p.partition_index, p.committed_offset, p.metadata or "", p.error_code) for p in t.partitions
        ]
        for t in g.topics
    }
    return g.error_code, parts


@pytest.mark.parametrize("version", [8, 7])
def test_offset_fetch_hides_topics_alice_may_not_describe(secured: Secured, version: int) -> None:
    a, b = secured.topics["A"], secured.topics["B"]
    group = f"alice-shared-{uuid.uuid4().hex[:6]}"
    broker_port = int(secured.kafka.bootstrap.rsplit(":", 1)[1])
    bob = secured.client("bob")
    _commit(bob, group, {a: 5, b: 7})
    _commit({**bob, "bootstrap.servers": secured.kafka.bootstrap}, group, {a: 5, b: 7})

    for topics in ([a, b], [b], None):
        ours = _ask(secured, secured.endpoint.port, version, group, topics)
        broker = _ask(secured, broker_port, version, group, topics)
        assert ours == broker, f"topics={topics}"
    # what the broker answered, spelled out (so the comparison cannot pass on two empty answers)
    code, named = _ask(secured, secured.endpoint.port, version, group, [a, b])
    assert code == ErrorCode.none
    assert named[a] == [(0, 5, "", ErrorCode.none)]
    assert named[b] == [(0, -1, "", ErrorCode.topic_authorization_failed)]
    code, everything = _ask(secured, secured.endpoint.port, version, group, None)
    assert code == ErrorCode.none and set(everything) == {a}
    # bob, who may DESCRIBE both, sees both offsets through the endpoint
    c = Consumer({**bob, "group.id": group})
    try:
        got = c.committed([TopicPartition(a, 0), TopicPartition(b, 0)], timeout=30)
        assert [(tp.topic, tp.offset) for tp in got] == [(a, 5), (b, 7)]
    finally:
        c.close()
