"""Storage faults between the daemon and S3, injected by a TCP fault proxy in front of SeaweedFS.

Each test tiers a real broker topic (1 MiB segments) with an in-process daemon whose S3 endpoint is
the proxy, holds one fault while segments become eligible, clears it, and ends with the same checks
(:meth:`tests.faults.storage.FaultRun.check`): every eligible segment COPY_SEGMENT_FINISHED exactly
once, no object of a failed attempt left in the bucket, ``rlm verify --deep`` exit 0, and every
record read back through the fetcher equal to what was produced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.proxy import FaultProxy
from tests.faults.storage import FaultRun, error_kinds
from tests.services.s3 import SeaweedFS

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


@pytest.fixture(scope="module")
def proxy(seaweedfs: SeaweedFS) -> Iterator[FaultProxy]:
    with FaultProxy.in_front_of(seaweedfs.endpoint_url) as p:
        yield p


@pytest.fixture
def make_run(
    kafka: Any, seaweedfs: SeaweedFS, proxy: FaultProxy, unique_topic: str, tmp_path: Path
) -> Iterator[Callable[..., FaultRun]]:
    """Starts the test's tiering run (keyword arguments override the tight S3 settings)."""
    runs: list[FaultRun] = []

    def make(**s3: Any) -> FaultRun:
        runs.append(FaultRun(kafka, seaweedfs, proxy, unique_topic, tmp_path, **s3))
        return runs[-1]

    proxy.clear()
    try:
        yield make
    finally:
        proxy.clear()
        for r in runs:
            r.stop()


@pytest.fixture
def run(make_run: Callable[..., FaultRun]) -> FaultRun:
    return make_run()


def test_latency(run: FaultRun, proxy: FaultProxy, capsys: pytest.CaptureFixture[str]) -> None:
    """100 ms added to every chunk both ways: everything is tiered during the fault, no attempt fails."""
    with proxy.fault(latency_s=0.1):
        run.produce_segments()
        run.wait_converged()
    assert run.errors() == 0, error_kinds(run.daemon)
    run.check(capsys)


def test_slow_bandwidth(
    make_run: Callable[..., FaultRun], proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Storage capped at 1 MiB/s per connection: uploads trickle but finish and no attempt fails."""
    # the read timeout must outlast the upload bytes buffered in sockets (~1 s of them at this cap)
    run = make_run(read_timeout=4.0)
    with proxy.fault(bandwidth=1 << 20):
        run.produce_segments()
        run.wait_converged()
    assert run.errors() == 0, error_kinds(run.daemon)
    run.check(capsys)


def test_connection_resets(
    make_run: Callable[..., FaultRun], proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Connections reset (RST) at open, then mid-upload: typed retriable errors, then tiered once."""
    run = make_run(multipart_threshold=256 * 1024)  # segments go up as multipart uploads
    resets = proxy.stats.resets
    with proxy.fault(reset_new=True):
        proxy.reset_in_flight()
        run.produce_segments()
        run.wait_errors(2, "resets of new connections")
    failed = run.errors()
    with proxy.fault(reset_after_bytes=256 * 1024):  # every 1 MiB segment upload is cut
        proxy.reset_in_flight()
        run.wait_errors(failed + 2, "uploads reset in the middle")
    assert proxy.stats.resets - resets >= 4
    assert "RemoteStorageError" in error_kinds(run.daemon)
    run.wait_converged()
    run.check(capsys)


def test_blackhole(
    make_run: Callable[..., FaultRun], proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Storage accepts, never answers: a copy attempt times out (typed, no hang), then all is tiered."""
    run = make_run(max_attempts=1)  # each request waits out one read timeout, not two
    with proxy.fault(blackhole=True):
        run.produce_segments()
        run.wait_errors(1, "a copy attempt timed out in the blackhole and returned")
        assert not run.converged()
    assert proxy.stats.blackholed >= 1
    assert "RemoteStorageError" in error_kinds(run.daemon)
    run.wait_converged()
    run.check(capsys)


def test_slowdown_503(
    make_run: Callable[..., FaultRun], proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """503 SlowDown to every request, then to 30 %: retries and backoff tier everything exactly once."""
    run = make_run(multipart_threshold=256 * 1024)  # aborts of multipart uploads get 503s too
    with proxy.fault(slowdown_fraction=1.0):
        run.produce_segments()
        run.wait_errors(2, "copies refused with SlowDown")
        assert not run.converged()
    with proxy.fault(slowdown_fraction=0.3):  # botocore's retries and the daemon's backoff get through
        run.wait_converged()
    assert proxy.stats.slowdowns >= 4
    run.check(capsys)
