"""The ``s3`` plugin's one-copy GET path (``rsm_plugins.s3_direct_get``).

Against a real S3 server (SeaweedFS, moto in server mode): the direct path serves the read core's
ranges without falling back. Against a small HTTP server on a real socket that misbehaves on
purpose: every answer that is not a complete 206 of the range asked is handed back to boto3
(``None``), a redirect switches the path off, and a kept-alive connection the server closed is
reopened.
"""

from __future__ import annotations

import http.server
import re
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rsm_plugins
from rlm.errors import ConfigError
from rsm_plugins.s3 import S3RemoteStorageManager
from rsm_plugins.s3_direct_get import DirectRangeGetter
from rsm_plugins.testing import SegmentFactory, finished
from tests.rsm.test_s3_contract import s3_config
from tests.services.s3 import S3Endpoint

BODY = bytes(range(256)) * 4096  # 1 MiB object


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    return SegmentFactory(tmp_path / "segments")


@pytest.mark.s3
@pytest.mark.parametrize("server_name", ["seaweedfs", "moto_server"])
def test_direct_path_serves_ranges_from_a_real_s3(
    server_name: str, request: pytest.FixtureRequest, segments: SegmentFactory
) -> None:
    server: S3Endpoint = request.getfixturevalue(server_name)
    bucket = server.create_bucket("direct")
    plugin = rsm_plugins.load("s3", s3_config(server, bucket))
    assert isinstance(plugin, S3RemoteStorageManager)
    try:
        seg = segments.make(3 << 20)
        md = finished(seg.metadata, plugin.copy_log_segment_data(seg.metadata, seg.data))
        n = len(seg.log)
        for start, end in ((0, n - 1), (5, 1 << 20), (n - 7, n + 100)):
            assert plugin.read_log_segment_range(md, start, end) == seg.log[start : end + 1]
        direct = plugin._direct
        assert direct is not None and direct.enabled
        assert direct.fallbacks == 0, "every range came from the direct path"
    finally:
        plugin.close()
        server.delete_bucket(bucket)


@pytest.mark.s3
def test_direct_path_off_under_a_proxy(
    moto_server: S3Endpoint, moto_bucket: str, segments: SegmentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy applies to the endpoint: the direct path turns itself off and boto3 reads."""
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # botocore would go through it too...
    monkeypatch.setenv("no_proxy", "")
    plugin = rsm_plugins.load("s3", s3_config(moto_server, moto_bucket))
    assert isinstance(plugin, S3RemoteStorageManager)
    try:
        direct = plugin._direct_getter()
        assert direct is not None
        assert direct.get(moto_bucket, "k", 0, 9) is None
        assert not direct.enabled
    finally:
        plugin.close()


@pytest.mark.parametrize("value", ["maybe", 3, None])
def test_a_bad_direct_range_gets_setting_is_a_config_error(value: object) -> None:
    cfg = {"bucket": "some-bucket", "endpoint_url": "http://127.0.0.1:9", "direct_range_gets": value}
    with pytest.raises(ConfigError, match="direct_range_gets"):
        rsm_plugins.load("s3", cfg)


# ---- a misbehaving HTTP server on a real socket -------------------------------------------------
Handler = Callable[[http.server.BaseHTTPRequestHandler, int, int], None]


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    answer: Handler
    requests = 0


@pytest.fixture
def fake() -> Iterator[_Server]:
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            assert m is not None
            srv: _Server = self.server  # type: ignore[assignment]
            srv.requests += 1
            srv.answer(self, int(m.group(1)), int(m.group(2)))

        def log_message(self, *args: object) -> None:
            pass

    srv = _Server(("127.0.0.1", 0), H)
    srv.answer = _partial
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _send(h: http.server.BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _partial(h: http.server.BaseHTTPRequestHandler, start: int, end: int) -> None:
    end = min(end, len(BODY) - 1)
    _send(h, 206, BODY[start : end + 1], {"Content-Range": f"bytes {start}-{end}/{len(BODY)}"})


def _getter(srv: _Server) -> DirectRangeGetter:
    port = srv.server_address[1]
    return DirectRangeGetter(lambda b, k: f"http://127.0.0.1:{port}/{b}/{k}?X-Amz-Signature=x",
                             connect_timeout=5, read_timeout=5)


def test_complete_partial_content_is_served_and_the_connection_kept(fake: _Server) -> None:
    g = _getter(fake)
    assert g.get("b", "k", 0, 99) == (BODY[:100], len(BODY))
    assert g.get("b", "k", len(BODY) - 5, len(BODY) + 50) == (BODY[-5:], len(BODY)), "end clamped"
    assert g.fallbacks == 0 and fake.requests == 2
    g.close()


@pytest.mark.parametrize("answer", [
    pytest.param(lambda h, s, e: _send(h, 206, BODY[s + 1 : e + 2],
                                       {"Content-Range": f"bytes {s + 1}-{e + 1}/{len(BODY)}"}),
                 id="another range"),
    pytest.param(lambda h, s, e: _send(h, 206, BODY[s:e], {"Content-Range": f"bytes {s}-{e}/{len(BODY)}"}),
                 id="shorter than its Content-Range"),
    pytest.param(lambda h, s, e: _send(h, 206, BODY[s : e + 1], {}), id="no Content-Range"),
    pytest.param(lambda h, s, e: _send(h, 200, BODY, {}), id="whole object"),
    pytest.param(lambda h, s, e: _send(h, 404, b"<Error><Code>NoSuchKey</Code></Error>", {}), id="missing"),
    pytest.param(lambda h, s, e: _send(h, 503, b"<Error><Code>SlowDown</Code></Error>", {}), id="throttled"),
])
def test_anything_but_the_range_asked_goes_back_to_boto3(fake: _Server, answer: Handler) -> None:
    fake.answer = answer
    g = _getter(fake)
    assert g.get("b", "k", 10, 4095) is None
    assert g.fallbacks == 1 and g.enabled, "one answer does not switch the path off"
    fake.answer = _partial
    assert g.get("b", "k", 10, 4095) == (BODY[10:4096], len(BODY)), "the next GET is direct again"
    g.close()


def test_body_cut_short_goes_back_to_boto3(fake: _Server) -> None:
    def cut(h: http.server.BaseHTTPRequestHandler, s: int, e: int) -> None:
        h.send_response(206)
        h.send_header("Content-Range", f"bytes {s}-{e}/{len(BODY)}")
        h.send_header("Content-Length", str(e - s + 1))
        h.end_headers()
        h.wfile.write(BODY[s : s + 100])
        h.close_connection = True

    fake.answer = cut
    g = _getter(fake)
    assert g.get("b", "k", 0, 4095) is None and g.fallbacks == 1
    fake.answer = _partial
    assert g.get("b", "k", 0, 4095) == (BODY[:4096], len(BODY))
    g.close()


def test_redirect_switches_the_direct_path_off(fake: _Server) -> None:
    fake.answer = lambda h, s, e: _send(h, 307, b"", {"Location": "http://elsewhere.invalid/"})
    g = _getter(fake)
    assert g.get("b", "k", 0, 9) is None and not g.enabled
    fake.answer = _partial
    before = fake.requests
    assert g.get("b", "k", 0, 9) is None and fake.requests == before, "off: no more direct GETs"


def test_connection_closed_by_the_server_while_idle_is_reopened(fake: _Server) -> None:
    def once_then_close(h: http.server.BaseHTTPRequestHandler, s: int, e: int) -> None:
        _partial(h, s, e)
        h.close_connection = True  # closed without saying so (no "Connection: close")

    fake.answer = once_then_close
    g = _getter(fake)
    for _ in range(3):
        assert g.get("b", "k", 0, 999) == (BODY[:1000], len(BODY))
    assert g.fallbacks == 0 and fake.requests == 3
    g.close()


def _getter_at(port: int) -> DirectRangeGetter:
    return DirectRangeGetter(lambda b, k: f"http://127.0.0.1:{port}/{b}/{k}",
                             connect_timeout=5, read_timeout=5)


def test_a_connection_refused_or_reset_at_connect_goes_back_to_boto3() -> None:
    """A connect that fails (nothing listening; a server resetting each new connection, as the
    fault proxy's ``reset_new`` does) is a fallback, never an OSError out of the plugin."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: the connect is refused
        g = _getter_at(port)
        assert g.get("b", "k", 0, 9) is None and g.fallbacks == 1 and g.enabled
    with socket.socket() as resetting:
        resetting.bind(("127.0.0.1", 0))
        resetting.listen(8)
        port = resetting.getsockname()[1]
        stop = threading.Event()

        def reset_each() -> None:
            while not stop.is_set():
                try:
                    conn, _ = resetting.accept()
                except OSError:
                    return
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()  # RST

        t = threading.Thread(target=reset_each, daemon=True)
        t.start()
        g = _getter_at(port)
        assert g.get("b", "k", 0, 9) is None and g.get("b", "k", 10, 19) is None
        assert g.fallbacks == 2 and g.enabled
        stop.set()
    t.join(5)
