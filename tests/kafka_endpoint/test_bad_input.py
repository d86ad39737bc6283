"""Hostile and broken clients on raw sockets: the endpoint answers what Kafka answers, closes
what Kafka closes, and keeps serving everybody else.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from fetcher.kafka import EndpointThread, ListenerSettings
from tests.kafka_endpoint.conftest import TOPIC, Served

_WAIT_S = 30  # socket timeout: only so a broken server fails the test instead of hanging it


def _frame(key: int, version: int, corr: int, body: Any) -> bytes:
    cls = load_request_schema(key, version)
    buf = io.BytesIO()
    hdr = cls.__header_schema__
    entity_writer(hdr)(
        buf,
        hdr(
            request_api_key=key, request_api_version=version, correlation_id=corr, client_id="bad-input-test"
        ),
    )
    entity_writer(cls)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def _raw(key: int, version: int, corr: int, payload: bytes = b"") -> bytes:
    data = struct.pack(">hhi", key, version, corr) + struct.pack(">h", -1) + payload
    return struct.pack(">i", len(data)) + data


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def _response(s: socket.socket, key: int, version: int) -> tuple[int, Any]:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    data = _recv_exact(s, size)
    cls = load_response_schema(key, version)
    hdr, n = entity_reader(cls.__header_schema__)(data, 0)
    body, m = entity_reader(cls)(data, n)
    assert n + m == len(data)
    return hdr.correlation_id, body


def _closed(s: socket.socket) -> bool:
    """True when the server closed the connection (EOF or reset) without sending anything."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def _api_versions(version: int = 3) -> Any:
    cls = load_request_schema(18, version)
    return cls(client_software_name="t", client_software_version="1") if version >= 3 else cls()


def _metadata(topics: Any = None) -> Any:
    return load_request_schema(3, 12)(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=_WAIT_S)
    return s


def _still_serves(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_frame(18, 3, 7, _api_versions()))
        corr, body = _response(s, 18, 3)
        assert corr == 7 and body.error_code == ErrorCode.none
        s.sendall(_frame(3, 12, 8, _metadata()))
        _, md = _response(s, 3, 12)
        assert [t.name for t in md.topics] == [TOPIC]


def test_api_versions_kip511(served: Served) -> None:
    port = served.endpoint.port
    with _connect(port) as s:
        s.sendall(_raw(18, 99, 1, b"\x00garbage"))  # a version nobody knows: v0 answer, error 35
        corr, body = _response(s, 18, 0)
        assert corr == 1 and body.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]
        s.sendall(_frame(18, 3, 2, _api_versions()))
        _, body = _response(s, 18, 3)
        keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert keys[1] == (4, 17) and keys[0] == (3, 9) and keys[18] == (0, 3)
        assert 36 not in keys and keys[23] == (2, 4)  # no SASL; OffsetForLeaderEpoch for validation


def test_unsupported_apis_get_an_error_not_a_drop(served: Served) -> None:
    with _connect(served.endpoint.port) as s:
        init = load_request_schema(22, 4)(
            transactional_id=None,
            transaction_timeout=datetime.timedelta(0),
            producer_id=-1,
            producer_epoch=-1,
        )
        s.sendall(_frame(22, 4, 11, init))  # InitProducerId: not served at all
        corr, body = _response(s, 22, 4)
        assert corr == 11 and body.error_code == ErrorCode.unsupported_version
        fetch18 = load_request_schema(1, 18)
        s.sendall(
            _frame(
                1,
                18,
                12,
                fetch18(max_wait=datetime.timedelta(0), min_bytes=1, topics=(), forgotten_topics_data=()),
            )
        )
        corr, body = _response(s, 1, 18)  # a Fetch version above the advertised range
        assert corr == 12 and body.error_code == ErrorCode.unsupported_version
        produce = load_request_schema(0, 9)
        pcls = __import__(produce.__module__, fromlist=["x"])
        req = produce(
            acks=1,
            timeout=datetime.timedelta(seconds=1),
            transactional_id=None,
            topic_data=(
                pcls.TopicProduceData(
                    name=TOPIC, partition_data=(pcls.PartitionProduceData(index=0, records=b""),)
                ),
            ),
        )
        s.sendall(_frame(0, 9, 13, req))
        corr, body = _response(s, 0, 9)
        assert corr == 13
        assert [p.error_code for t in body.responses for p in t.partition_responses] == [
            ErrorCode.unsupported_version
        ]
        s.sendall(_frame(18, 3, 14, _api_versions()))  # the connection is still usable
        assert _response(s, 18, 3)[0] == 14


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(_raw(9999, 0, 1), id="unknown-api-key"),
        pytest.param(_raw(1, 2, 1), id="fetch-v2-removed"),
        pytest.param(_raw(3, 12, 1, b"\xff\xff\xff\xff\xff"), id="garbage-metadata-body"),
        pytest.param(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16, id="size-prefix-over-limit"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">i", 3) + b"abc", id="shorter-than-a-header"),
    ],
)
def test_bad_frames_close_only_that_connection(served: Served, bad: bytes) -> None:
    port = served.endpoint.port
    with _connect(port) as s:
        s.sendall(bad)
        assert _closed(s)
    _still_serves(port)


def test_truncated_frame_then_eof(served: Served) -> None:
    port = served.endpoint.port
    with _connect(port) as s:
        s.sendall(_frame(18, 3, 1, _api_versions())[:9])
        s.shutdown(socket.SHUT_WR)
        assert _closed(s)
    _still_serves(port)


def test_pipelined_responses_keep_request_order(served: Served) -> None:
    with _connect(served.endpoint.port) as s:
        reqs = [(3, 12, _metadata()), (18, 3, _api_versions())] * 6
        s.sendall(b"".join(_frame(k, v, 100 + i, b) for i, (k, v, b) in enumerate(reqs)))
        corrs = [_response(s, k, v)[0] for k, v, _ in reqs]
    assert corrs == list(range(100, 100 + len(reqs)))


@pytest.fixture
def strict(served: Served) -> Iterator[EndpointThread]:
    """A second listener on the same read core with tight limits."""
    settings = ListenerSettings(
        host="127.0.0.1",
        port=0,
        max_connections=3,
        max_request_bytes=4096,
        max_in_flight=2,
        idle_timeout_ms=500,
    )
    ep = EndpointThread(served.fetcher, settings, served.work / "strict-state")
    try:
        yield ep
    finally:
        ep.close()


def test_idle_and_slow_senders_are_closed(strict: EndpointThread) -> None:
    with _connect(strict.port) as idle, _connect(strict.port) as slow:
        frame = _frame(18, 3, 1, _api_versions())
        slow.sendall(frame[:6])  # then never the rest
        _still_serves(strict.port)
        assert _closed(idle)
        assert _closed(slow)
    _still_serves(strict.port)


def test_max_connections(strict: EndpointThread) -> None:
    held = [_connect(strict.port) for _ in range(3)]
    try:
        for i, s in enumerate(held):  # each one is accepted and served
            s.sendall(_frame(18, 3, i, _api_versions()))
            assert _response(s, 18, 3)[0] == i
        with _connect(strict.port) as extra:
            assert _closed(extra)
    finally:
        for s in held:
            s.close()
    _wait_for(lambda: strict.endpoint.connections == 0)  # the server has seen the closes
    _still_serves(strict.port)


def _wait_for(pred: Any) -> None:
    give_up = time.monotonic() + _WAIT_S
    while not pred():
        assert time.monotonic() < give_up, "condition never became true"
        time.sleep(0.02)


def test_request_over_limit(strict: EndpointThread) -> None:
    with _connect(strict.port) as s:
        s.sendall(struct.pack(">i", 4097) + b"\x00" * 4097)
        assert _closed(s)
    _still_serves(strict.port)


def test_client_that_stops_reading(served: Served, strict: EndpointThread) -> None:
    """Big pipelined fetches never read: the connection stalls and is dropped; others go on."""
    fetch = load_request_schema(1, 12)
    mod = __import__(fetch.__module__, fromlist=["x"])
    parts = tuple(
        mod.FetchPartition(
            partition=p,
            fetch_offset=0,
            partition_max_bytes=1 << 20,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        for p in (0, 1)
    )
    req = fetch(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 22,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=TOPIC, partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )
    s = _connect(strict.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        for i in range(40):
            try:
                s.sendall(_frame(1, 12, i, req))
            except OSError:
                break  # the server gave up on us: that is the point
        _still_serves(strict.port)
        _still_serves(served.endpoint.port)
    finally:
        s.close()
    _still_serves(strict.port)


@pytest.mark.parametrize(
    ("conf", "named"),
    [({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
     ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),  # librdkafka's default: GSSAPI
     ({"security.protocol": "SASL_PLAIN"}, "security.protocol")],
)
def test_merged_mode_refuses_a_login_it_cannot_do(conf: dict[str, str], named: str) -> None:
    """The endpoint's own broker connections cannot use Kerberos: refusing at start beats connecting
    without the login every other connection uses."""
    from fetcher.cluster_auth import BrokerLogin
    from rlm.errors import ConfigError

    with pytest.raises(ConfigError, match=named):
        BrokerLogin.from_client_config(conf)
    ok = BrokerLogin.from_client_config({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN"})
    assert ok.sasl and ok.mechanism == "PLAIN" and ok.tls is None
