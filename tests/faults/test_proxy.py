"""The fault proxy itself, against the session's SeaweedFS through boto3 (kept tiny: one client each)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from tests.faults.proxy import FaultProxy
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, SeaweedFS

pytestmark = [pytest.mark.faults, pytest.mark.s3]


@pytest.fixture(scope="module")
def proxy(seaweedfs: SeaweedFS) -> Iterator[FaultProxy]:
    with FaultProxy.in_front_of(seaweedfs.endpoint_url) as p:
        yield p


@pytest.fixture
def client(proxy: FaultProxy) -> Iterator[Any]:
    """A boto3 client through the proxy: one attempt, 1 s timeouts (faults show, never retried)."""
    proxy.clear()
    yield through(proxy)
    proxy.clear()


def through(proxy: FaultProxy) -> Any:
    cfg = Config(
        s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=1
    )
    return boto3.client(
        "s3",
        endpoint_url=proxy.endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=cfg,
    )


def test_each_mode_then_pass_through(proxy: FaultProxy, client: Any, seaweedfs_bucket: str) -> None:
    """The proxy's own check: each mode reaches boto3 as that fault (503, RST, timeout), data intact after."""
    b, body = seaweedfs_bucket, bytes(range(256)) * 2048  # 512 KiB
    client.put_object(Bucket=b, Key="k", Body=body)
    assert client.get_object(Bucket=b, Key="k")["Body"].read() == body

    with proxy.fault(slowdown_count=1):
        with pytest.raises(ClientError) as e:
            client.get_object(Bucket=b, Key="k")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert client.get_object(Bucket=b, Key="k")["Body"].read() == body  # the count is spent

    with proxy.fault(reset_new=True):
        proxy.reset_in_flight()  # the kept-alive connection too: the next request needs a new one
        with pytest.raises((ConnectionClosedError, EndpointConnectionError)):  # as the RST lands
            client.put_object(Bucket=b, Key="r", Body=body)

    with proxy.fault(reset_after_bytes=100_000):  # a download cut in the middle of the body
        stream = client.get_object(Bucket=b, Key="k")["Body"]
        with pytest.raises(ResponseStreamingError, match="reset"):
            stream.read()

    with proxy.fault(blackhole=True), pytest.raises(ReadTimeoutError):
        client.head_object(Bucket=b, Key="k")
    assert proxy.stats.blackholed >= 1

    with proxy.fault(latency_s=0.05, bandwidth=4 << 20):
        assert client.get_object(Bucket=b, Key="k")["Body"].read() == body
        client.put_object(Bucket=b, Key="slow", Body=body)
    assert client.get_object(Bucket=b, Key="slow")["Body"].read() == body
    assert proxy.stats.slowdowns == 1 and proxy.stats.resets >= 2


def test_reset_in_flight_and_fraction(proxy: FaultProxy, client: Any, seaweedfs_bucket: str) -> None:
    """The proxy's own check: open connections reset on demand, a fraction of requests answered 503."""
    b = seaweedfs_bucket
    client.put_object(Bucket=b, Key="k", Body=b"x")
    assert proxy.reset_in_flight() >= 1  # the client's kept-alive connection
    assert client.get_object(Bucket=b, Key="k")["Body"].read() == b"x"  # a new connection works
    with proxy.fault(slowdown_fraction=0.5):
        outcomes = []
        for _ in range(30):
            try:
                client.head_object(Bucket=b, Key="k")
                outcomes.append("ok")
            except ClientError as e:
                outcomes.append(e.response["Error"]["Code"])
    assert set(outcomes) == {"ok", "503"}  # HEAD answers carry no body, so no Code but the status
