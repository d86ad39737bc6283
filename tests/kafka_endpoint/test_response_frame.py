"""A response frame keeps large values by reference and equals the one-buffer encoding."""

from __future__ import annotations

import io
import os
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from fetcher.kafka.api_meta import ZERO
from fetcher.kafka.codec import encode_response, make, nested, response_class


def _one_buffer(corr: int, resp: object) -> bytes:
    """The plain encoding: header and body into one BytesIO, size prefix in front."""
    buf = io.BytesIO()
    hcls = resp.__header_schema__  # type: ignore[attr-defined]
    entity_writer(hcls)(buf, hcls(correlation_id=corr))
    entity_writer(type(resp))(buf, resp)  # type: ignore[arg-type]
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("version", [4, 11, 12, 16])
@pytest.mark.parametrize("sizes", [(0, 0), (100, 300_000), (2_000_000, 70_000, 5)])
def test_fetch_frame_equals_one_buffer_and_keeps_records(version: int, sizes: tuple[int, ...]) -> None:
    cls = response_class(1, version)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    records = [os.urandom(n) for n in sizes]
    parts = tuple(make(part_cls, partition_index=i, error_code=ErrorCode.none, high_watermark=10,
                       last_stable_offset=10, log_start_offset=0, aborted_transactions=None,
                       preferred_read_replica=-1, records=r) for i, r in enumerate(records))
    resp = make(cls, throttle_time=ZERO, error_code=ErrorCode.none, session_id=0,
                responses=(make(topic_cls, topic="t", topic_id=None, partitions=parts),))
    frame = encode_response(7, resp)
    assert frame.tobytes() == _one_buffer(7, resp)
    assert len(frame) == len(frame.tobytes())
    big = [r for r in records if len(r) >= 64 * 1024]
    for r in big:  # sent from the handler's own object, not a copy
        assert any(p is r for p in frame.parts)
    assert len(frame.parts) <= 2 * len(big) + 1


@pytest.mark.parametrize("version", [4, 12, 16])
def test_record_views_are_sent_as_they_are(version: int) -> None:
    """A Fetch's records as RecordViews (views of cached chunks, not joined): the frame sends the
    views themselves, and its bytes equal the encoding of the joined records."""
    from fetcher.fetch import RecordViews

    cls = response_class(1, version)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    chunk = os.urandom(300_000)
    views = [memoryview(chunk)[0:100_000], memoryview(chunk)[100_000:100_050], memoryview(chunk)[200_000:]]

    def response(records: object) -> object:
        part = make(part_cls, partition_index=0, error_code=ErrorCode.none, high_watermark=10,
                    last_stable_offset=10, log_start_offset=0, aborted_transactions=None,
                    preferred_read_replica=-1, records=records)
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, session_id=0,
                    responses=(make(topic_cls, topic="t", topic_id=None, partitions=(part,)),))

    rv = RecordViews(views)
    frame = encode_response(7, response(rv))  # type: ignore[arg-type]
    assert frame.tobytes() == _one_buffer(7, response(bytes(rv)))
    assert len(frame) == len(frame.tobytes())
    assert [p for p in frame.parts if isinstance(p, memoryview)] == views  # by reference, in order
    assert all(any(p is v for p in frame.parts) for v in views)
    empty = RecordViews([])
    assert not empty and len(empty) == 0 and bytes(empty) == b""
