"""Receiving a ranged GET straight into a caller's buffer (the read core's read-ahead buffers):
``DirectRangeGetter.get_into`` and the ``s3`` plugin's ``read_log_segment_range_into``. A body
that ends early is never a short count: the direct path hands the GET back to boto3, which
reads the whole range again."""

from __future__ import annotations

import http.server

import pytest

import rsm_plugins
from rsm_plugins.s3 import S3RemoteStorageManager
from rsm_plugins.s3_direct_get import DirectRangeGetter
from rsm_plugins.testing import SegmentFactory, finished
from tests.rsm.test_s3_contract import s3_config
from tests.rsm.test_s3_direct_get import BODY, _getter, _partial, _Server, fake, segments
from tests.services.s3 import S3Endpoint

__all__ = ["fake", "segments"]  # fixtures used here


def _cut(h: http.server.BaseHTTPRequestHandler, s: int, e: int) -> None:
    """A 206 whose connection closes after 100 bytes of the Content-Length it announced."""
    h.send_response(206)
    h.send_header("Content-Range", f"bytes {s}-{e}/{len(BODY)}")
    h.send_header("Content-Length", str(e - s + 1))
    h.end_headers()
    h.wfile.write(BODY[s : s + 100])
    h.close_connection = True


def test_a_range_is_received_into_the_buffer(fake: _Server) -> None:
    g = _getter(fake)
    out = bytearray(4096)
    assert g.get_into("b", "k", 10, memoryview(out)) == (4096, len(BODY))
    assert out == BODY[10:4106]
    tail = bytearray(4096)
    assert g.get_into("b", "k", len(BODY) - 5, memoryview(tail)) == (5, len(BODY)), "end of the object"
    assert tail[:5] == BODY[-5:]
    assert g.fallbacks == 0
    g.close()


def test_a_body_cut_short_is_handed_back_never_a_short_count(fake: _Server) -> None:
    fake.answer = _cut
    g = _getter(fake)
    assert g.get_into("b", "k", 0, memoryview(bytearray(4096))) is None
    assert g.fallbacks == 1
    fake.answer = _partial
    out = bytearray(4096)
    assert g.get_into("b", "k", 0, memoryview(out)) == (4096, len(BODY)), "a new connection serves it"
    assert out == BODY[:4096]
    g.close()


@pytest.mark.s3
def test_the_plugin_reads_a_range_whole_when_the_direct_body_ends_early(
        seaweedfs: S3Endpoint, fake: _Server, segments: SegmentFactory) -> None:
    """The plugin's direct path points at a server that cuts every body: each read comes back
    whole through boto3 from the real store, into the caller's buffer."""
    bucket = seaweedfs.create_bucket("into")
    plugin = rsm_plugins.load("s3", s3_config(seaweedfs, bucket))
    assert isinstance(plugin, S3RemoteStorageManager)
    try:
        seg = segments.make(3 << 20)
        md = finished(seg.metadata, plugin.copy_log_segment_data(seg.metadata, seg.data))
        n = len(seg.log)
        for start, size in ((0, 1 << 20), (5, 1 << 20), (n - 7, 4096)):
            out = bytearray(size)
            got = plugin.read_log_segment_range_into(md, start, memoryview(out))
            assert got == min(size, n - start)
            assert out[:got] == seg.log[start : start + got]
        direct = plugin._direct
        assert direct is not None and direct.fallbacks == 0, "the real store answered directly"
        fake.answer = _cut
        cutting: DirectRangeGetter = _getter(fake)
        plugin._direct = cutting
        out = bytearray(1 << 20)
        assert plugin.read_log_segment_range_into(md, 5, memoryview(out)) == 1 << 20
        assert out == seg.log[5 : 5 + (1 << 20)]
        assert cutting.fallbacks == 1
        cutting.close()
    finally:
        plugin.close()
        seaweedfs.delete_bucket(bucket)
