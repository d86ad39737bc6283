"""Field values the protocol does not allow answer INVALID_REQUEST in the API's response shape
(the top-level error where the API has one, else on every partition the request named; a bad
partition field only on that partition), with one warning line and no traceback; the connection
and the other partitions of the request are served as usual."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from kio.schema.errors import ErrorCode

from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _connect, _still_serves
from tests.kafka_endpoint.test_groups import _call

_INVALID = ErrorCode.invalid_request


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """The endpoint's log entries during the test (its thread logs through the same structlog)."""
    with structlog.testing.capture_logs() as entries:
        yield entries


def _no_traceback(logs: list[dict[str, Any]], warnings: int) -> None:
    assert not [e for e in logs if e["event"] == "kafka_handler_failed" or "exc_info" in e]
    found = [e for e in logs if e["event"] == "kafka_request_field_invalid"]
    assert len(found) == warnings and all(e["log_level"] == "warning" for e in found)


def _fetch(s: Any, version: int, corr: int, parts: dict[int, int], **top: Any) -> Any:
    """Fetch of partitions {partition: partition_max_bytes} of TOPIC at offset 0."""
    epochs = {"current_leader_epoch": -1, "last_fetched_epoch": -1} if version >= 12 else {}
    fields: dict[str, Any] = {
        "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=10), "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": lambda m: (m.FetchTopic(topic=TOPIC, partitions=tuple(
            m.FetchPartition(partition=p, fetch_offset=0, log_start_offset=-1, partition_max_bytes=n,
                             **epochs)
            for p, n in parts.items())),),
    }
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version >= 11:
        fields["rack_id"] = ""
    if version >= 12:
        fields["cluster_id"] = None
    fields.update(top)
    return _call(s, 1, version, corr, **fields)


def _by_partition(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


@pytest.mark.parametrize(("field", "value"), [("isolation_level", 7), ("isolation_level", -1),
                                              ("max_bytes", -1)])
def test_fetch_request_fields(served: Served, logs: list[dict[str, Any]], field: str, value: int) -> None:
    with _connect(served.endpoint.port) as s:
        resp = _fetch(s, 12, 1, {0: 4096}, **{field: value})
        assert resp.error_code == _INVALID and resp.responses == ()
        # before v7 there is no top-level error: every partition asked carries it, none is read
        old = _fetch(s, 5, 2, {0: 4096, 1: 4096}, **{field: value})
        got = _by_partition(old)
        assert set(got) == {0, 1} and all(p.error_code == _INVALID and not p.records for p in got.values())
        fine = _fetch(s, 12, 3, {0: 4096})
        assert fine.error_code == ErrorCode.none and _by_partition(fine)[0].records
    _no_traceback(logs, 2)


def test_fetch_partition_fields(served: Served, logs: list[dict[str, Any]]) -> None:
    with _connect(served.endpoint.port) as s:
        resp = _fetch(s, 12, 1, {-1: 4096, 1: -5, 0: 4096})
        assert resp.error_code == ErrorCode.none
        got = _by_partition(resp)
        assert got[-1].error_code == _INVALID and got[1].error_code == _INVALID and not got[1].records
        assert got[0].error_code == ErrorCode.none and got[0].records
    _no_traceback(logs, 0)  # answered per partition by the handler itself


def _list_offsets(s: Any, corr: int, parts: tuple[int, ...], isolation: int) -> Any:
    return _call(
        s, 2, 7, corr, replica_id=-1, isolation_level=isolation,
        topics=lambda m: (m.ListOffsetsTopic(name=TOPIC, partitions=tuple(
            m.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-2)
            for p in parts)),),
    )


def test_list_offsets_fields(served: Served, logs: list[dict[str, Any]]) -> None:
    with _connect(served.endpoint.port) as s:
        bad = _list_offsets(s, 1, (0, 1), 3)
        codes = {p.partition_index: p.error_code for t in bad.topics for p in t.partitions}
        assert codes == {0: _INVALID, 1: _INVALID}
        mixed = _list_offsets(s, 2, (-2, 0), 1)
        got = {p.partition_index: p for t in mixed.topics for p in t.partitions}
        assert got[-2].error_code == _INVALID
        assert got[0].error_code == ErrorCode.none and got[0].offset == 0
    _no_traceback(logs, 1)
    _still_serves(served.endpoint.port)
