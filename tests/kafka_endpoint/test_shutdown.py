"""The endpoint's event loop and lifecycle: committed offsets are read off the event loop, ``rlm
serve --kafka-listener`` answers the Kafka requests it has read before it closes the read core,
and a listener that cannot start leaves nothing open behind it.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.cli import main as cli_main
from rlm.config import ReadConfig
from rlm.exit_codes import ExitCode
from tests.fetcher_http.controlled_rsm import ControlledRSM
from tests.kafka_endpoint.conftest import TOPIC, Served
from tests.kafka_endpoint.test_bad_input import _api_versions, _frame, _response

ROOT = Path(__file__).resolve().parents[2]
_WAIT_S = 30  # socket timeout: only so a blocked server fails the test instead of hanging it


@pytest.fixture
def endpoint(served: Served, tmp_path: Path) -> Iterator[EndpointThread]:
    with EndpointThread(served.fetcher, ListenerSettings(port=0, merged=False), tmp_path / "state") as ep:
        yield ep


def _offset_fetch(group: str) -> Any:
    cls = load_request_schema(9, 7)
    mod = __import__(cls.__module__, fromlist=["x"])
    return cls(
        group_id=group,
        topics=(mod.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),),
        require_stable=False,
    )


def test_offset_fetch_waits_off_the_event_loop(endpoint: EndpointThread) -> None:
    """While a commit holds the offset store (writing and fsyncing its file), an OffsetFetch
    waits for it on a worker thread; every other connection is served meanwhile."""
    store_lock = endpoint.endpoint.ctx.offsets._lock  # what a commit in progress holds
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=_WAIT_S) as waiting, \
            socket.create_connection(("127.0.0.1", endpoint.port), timeout=_WAIT_S) as other:
        store_lock.acquire()
        try:
            waiting.sendall(_frame(9, 7, 1, _offset_fetch("g1")))
            other.sendall(_frame(18, 3, 2, _api_versions()))
            corr, body = _response(other, 18, 3)  # answered although the OffsetFetch waits
            assert corr == 2 and body.error_code is ErrorCode.none
        finally:
            store_lock.release()
        corr, body = _response(waiting, 9, 7)
    assert corr == 1 and body.error_code is ErrorCode.none
    assert [p.committed_offset for t in body.topics for p in t.partitions] == [-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(served: Served, tmp_path: Path) -> Path:
    """``rlm serve`` over the served fixture's remote tier, with a work dir of its own."""
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({
        "work_dir": str(tmp_path / "work"),
        "storage": {"plugin": "local", "config": {"root": str(served.work / "work" / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(served.work / "work" / "metadata")}},
    }))
    return cfg


def _long_poll(offset: int) -> Any:
    """A Fetch at the log end that waits up to 5 s for data (a consumer at the tail)."""
    fetch = load_request_schema(1, 12)
    mod = __import__(fetch.__module__, fromlist=["x"])
    part = mod.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=65536,
                              current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
    return fetch(max_wait=datetime.timedelta(seconds=5), min_bytes=1, max_bytes=65536, isolation_level=0,
                 session_id=0, session_epoch=-1, topics=(mod.FetchTopic(topic=TOPIC, partitions=(part,)),),
                 forgotten_topics_data=(), rack_id="")


@pytest.mark.slow
def test_serve_answers_in_flight_kafka_requests_on_sigterm(served: Served, tmp_path: Path) -> None:
    kafka_port = _free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlm.cli", "serve", "--config", str(_config(served, tmp_path)),
             "--port", "0", "--kafka-listener", f"127.0.0.1:{kafka_port}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        s = _connect_when_up(kafka_port, proc, log)
        with s:
            log_end = served.expected.log_end[0]
            s.sendall(_frame(18, 3, 1, _api_versions()) + _frame(1, 12, 2, _long_poll(log_end)))
            assert _response(s, 18, 3)[0] == 1  # the connection is reading: the Fetch is in flight
            threading.Event().wait(0.5)
            proc.send_signal(signal.SIGTERM)
            corr, body = _response(s, 1, 12)  # answered, not cut off by the shutdown
        p = body.responses[0].partitions[0]
        assert corr == 2 and p.error_code is ErrorCode.none and p.high_watermark == log_end
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _connect_when_up(port: int, proc: subprocess.Popen[bytes], log: Path) -> socket.socket:
    for _ in range(600):
        assert proc.poll() is None, log.read_text()
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=_WAIT_S)
        except ConnectionRefusedError:
            threading.Event().wait(0.1)
    raise AssertionError(f"the Kafka listener never came up:\n{log.read_text()}")


def test_listener_that_cannot_start_is_a_config_error(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An address in use: exit status 3 naming the listener, after closing the HTTP server's read
    core (nothing was started)."""
    cfg = _config(served, tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        listener = f"127.0.0.1:{port}"
        code = cli_main(["serve", "--config", str(cfg), "--port", "0", "--kafka-listener", listener])
    assert code == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert "Kafka listener" in err and f"127.0.0.1:{port}" in err


def test_stop_is_bounded_by_a_request_that_never_ends(served: Served, tmp_path: Path) -> None:
    """A request stuck in storage does not hold the listener's shutdown: after the grace period
    its connection is closed (no answer) and stop returns while the read is still held."""
    rsm = ControlledRSM()
    rsm.configure({"root": str(served.work / "work" / "remote")})
    read = ReadConfig.model_validate({"fetch_max_wait_ms": 120_000})
    f = RemoteFetcher(rsm, served.fetcher.rlmm, work_dir=tmp_path / "work", read=read)
    ep = EndpointThread(f, ListenerSettings(port=0, merged=False), tmp_path / "state")
    try:
        ControlledRSM.mode = "block"
        with socket.create_connection(("127.0.0.1", ep.port), timeout=_WAIT_S) as s:
            s.sendall(_frame(1, 12, 1, _long_poll(0)))
            assert ControlledRSM.entered.wait(_WAIT_S)  # the Fetch is held in storage
            stopping = asyncio.run_coroutine_threadsafe(ep.endpoint.stop(), ep._loop)
            stopping.result(timeout=60)  # returns although the read is still held
            assert not ControlledRSM.gate.is_set()
            assert s.recv(1) == b""  # closed without an answer
    finally:
        ControlledRSM.reset()  # releases the held read
        ep.close()
        f.close()
