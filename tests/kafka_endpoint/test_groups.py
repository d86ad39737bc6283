"""The endpoint's own coordinator on the wire: classic groups and offsets that outlive it."""

from __future__ import annotations

import datetime
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher.kafka import EndpointThread, ListenerSettings
from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _connect, _frame, _response


def _call(s: Any, key: int, version: int, corr: int, **fields: Any) -> Any:
    cls = load_request_schema(key, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    s.sendall(_frame(key, version, corr, cls(**{k: v(mod) if callable(v) else v for k, v in fields.items()})))
    got_corr, body = _response(s, key, version)
    assert got_corr == corr
    return body


def _join(s: Any, corr: int, group: str, member: str = "") -> Any:
    return _call(
        s,
        11,
        5,
        corr,
        group_id=group,
        session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30),
        member_id=member,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=lambda m: (m.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
    )


def test_group_lifecycle_on_the_wire(served: Served) -> None:
    """JoinGroup v5 (MEMBER_ID_REQUIRED first, KIP-394), SyncGroup, Heartbeat, DescribeGroups,
    ListGroups and LeaveGroup as a client sends them; a second member's join starts a rebalance."""
    with _connect(served.endpoint.port) as a, _connect(served.endpoint.port) as b:
        first = _join(a, 1, "wire")
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        ja = _join(a, 2, "wire", first.member_id)
        assert ja.error_code == ErrorCode.none and ja.leader == ja.member_id == first.member_id
        assert [m.member_id for m in ja.members] == [ja.member_id]
        sync = _call(
            a, 14, 3, 3, group_id="wire", generation_id=ja.generation_id, member_id=ja.member_id,
            group_instance_id=None,
            assignments=lambda m: (m.SyncGroupRequestAssignment(member_id=ja.member_id, assignment=b"plan"),),
        )
        assert sync.error_code == ErrorCode.none and sync.assignment == b"plan"
        described = _call(a, 15, 5, 4, groups=("wire", "unknown-group"), include_authorized_operations=False)
        wire, unknown = described.groups
        assert (wire.group_state, wire.protocol_type, wire.protocol_data) == ("Stable", "consumer", "range")
        assert [(m.member_id, m.member_assignment, m.member_metadata) for m in wire.members] == [
            (ja.member_id, b"plan", b"\x00\x01")]
        assert wire.members[0].client_host.startswith("/127.0.0.1")
        assert (unknown.error_code, unknown.group_state, unknown.members) == (ErrorCode.none, "Dead", ())
        listed = _call(a, 16, 4, 5, states_filter=())
        assert ("wire", "Stable") in [(g.group_id, g.group_state) for g in listed.groups]
        hb = _call(a, 12, 3, 6, group_id="wire", generation_id=ja.generation_id, member_id=ja.member_id,
                   group_instance_id=None)
        assert hb.error_code == ErrorCode.none
        stale = _call(a, 12, 3, 7, group_id="wire", generation_id=ja.generation_id - 1,
                      member_id=ja.member_id, group_instance_id=None)
        assert stale.error_code == ErrorCode.illegal_generation
        # a second member: its JoinGroup waits for the rebalance, which the first member's
        # heartbeat learns of; the first rejoins and both get the next generation
        kb = _join(b, 8, "wire")
        assert kb.error_code == ErrorCode.member_id_required
        b.sendall(_join_frame(9, "wire", kb.member_id))
        hb = _call(a, 12, 3, 10, group_id="wire", generation_id=ja.generation_id, member_id=ja.member_id,
                   group_instance_id=None)
        assert hb.error_code == ErrorCode.rebalance_in_progress
        ja2 = _join(a, 11, "wire", ja.member_id)
        _corr, jb = _response(b, 11, 5)
        assert ja2.generation_id == jb.generation_id == ja.generation_id + 1
        assert {m.member_id for m in ja2.members} == {ja.member_id, kb.member_id} and jb.members == ()
        left = _call(a, 13, 3, 12, group_id="wire",
                     members=lambda m: (m.MemberIdentity(member_id=ja.member_id, group_instance_id=None),))
        assert [x.error_code for x in left.members] == [ErrorCode.none]
        hb = _call(b, 12, 3, 13, group_id="wire", generation_id=jb.generation_id, member_id=kb.member_id,
                   group_instance_id=None)
        assert hb.error_code == ErrorCode.rebalance_in_progress  # the leader left


def _join_frame(corr: int, group: str, member: str) -> bytes:
    cls = load_request_schema(11, 5)
    mod = __import__(cls.__module__, fromlist=["x"])
    return _frame(11, 5, corr, cls(
        group_id=group, session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30), member_id=member, group_instance_id=None,
        protocol_type="consumer",
        protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),)))


def test_committed_offsets_survive_a_restart(served: Served) -> None:
    state = served.work / "restart-state"
    settings = ListenerSettings(port=0, merged=False)
    with EndpointThread(served.fetcher, settings, state) as ep, _connect(ep.port) as s:
        commit = _call(
            s,
            8,
            8,
            1,
            group_id="keep",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=lambda m: (
                m.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=(
                        m.OffsetCommitRequestPartition(
                            partition_index=1,
                            committed_offset=1234,
                            committed_leader_epoch=0,
                            committed_metadata="m",
                        ),
                    ),
                ),
            ),
        )
        assert [p.error_code for t in commit.topics for p in t.partitions] == [ErrorCode.none]
    with EndpointThread(served.fetcher, settings, state) as ep, _connect(ep.port) as s:
        got = _call(
            s,
            9,
            8,
            2,
            require_stable=False,
            groups=lambda m: (
                m.OffsetFetchRequestGroup(
                    group_id="keep",
                    topics=(m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(1, 0)),),
                ),
            ),
        )
        rows = {
            p.partition_index: (p.committed_offset, p.metadata)
            for g in got.groups
            for t in g.topics
            for p in t.partitions
        }
        assert rows == {1: (1234, "m"), 0: (-1, "")}
        v1 = _call(
            s,
            9,
            1,
            3,
            group_id="keep",
            topics=lambda m: (m.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(1,)),),
        )
        assert [p.committed_offset for t in v1.topics for p in t.partitions] == [1234]
        coord = _call(s, 10, 4, 4, key_type=0, coordinator_keys=("keep",))
        assert [(c.node_id, c.port, c.error_code) for c in coord.coordinators] == [
            (0, ep.port, ErrorCode.none)
        ]


def test_offset_for_leader_epoch_follows_the_lineage(served: Served) -> None:
    """Kafka's endOffsetFor over partition 0's lineage (two epochs), on the wire, as v2 and v4."""
    plan = served.fetcher.plan(TOPIC, 0)
    (e0, _s0), (e1, s1) = plan.lineage
    asked = [e0, e1, e1 + 5, e0 + 1 if e0 + 1 < e1 else e0]
    want = {e0: (e0, s1), e1: (e1, plan.log_end), e1 + 5: (-1, -1)}
    want[asked[-1]] = (e0, s1)  # between the two: the floor epoch, ending where the next begins
    with _connect(served.endpoint.port) as s:
        for version, corr in ((2, 1), (4, 2)):
            extra = {} if version < 3 else {"replica_id": -1}
            got = _call(s, 23, version, corr, **extra, topics=lambda m: (m.OffsetForLeaderTopic(
                topic=TOPIC, partitions=tuple(
                    m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=e)
                    for e in asked)),))
            rows = [(p.error_code, p.leader_epoch, p.end_offset) for t in got.topics for p in t.partitions]
            assert rows == [(ErrorCode.none, *want[e]) for e in asked]
        unknown = _call(s, 23, 4, 3, replica_id=-1, topics=lambda m: (m.OffsetForLeaderTopic(
            topic="nope", partitions=(m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                                 leader_epoch=0),)),))
        assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
