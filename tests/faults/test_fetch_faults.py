"""The read side under storage faults: ``RemoteFetcher`` (and the HTTP API over it) reading a tiered
partition from SeaweedFS through the fault proxy.

One partition (every codec, transactions, a leader-epoch change, 16 KiB segments) is tiered to
SeaweedFS once for the module by the daemon (``--once``, embedded metadata store). Each test opens
its own reader (own index cache, no chunk cache: every read goes through the proxy) and compares
what it reads with the records of the local segments. A read may fail under a fault, but only with
a typed error; it never returns fewer or other records than were tiered.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from fetcher import RemoteFetcher
from fetcher.http.server import HttpApiServer
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.errors import FetchTimeoutError, RemoteStorageError, RlmError
from rlm.log.records import Record, iter_records
from rlm.types import IndexType
from tests.daemon.helpers import s3_storage, wait_for
from tests.faults.proxy import FaultProxy
from tests.faults.storage import TIGHT_S3
from tests.fetcher._tiered import Tiered, write_mixed_partition
from tests.services.s3 import SeaweedFS

pytestmark = [pytest.mark.faults, pytest.mark.s3]

TOPIC = "mixed"
Rec = tuple[int, bytes | None, bytes | None, int]


@dataclass
class Remote:
    """The tiered partition: local truth and where its remote copy lives."""

    local: Tiered
    bucket: str
    metadata_dir: Path

    @property
    def truth(self) -> list[Rec]:
        return self.local.local_records()


@pytest.fixture(scope="module")
def proxy(seaweedfs: SeaweedFS) -> Iterator[FaultProxy]:
    with FaultProxy.in_front_of(seaweedfs.endpoint_url) as p:
        yield p


@pytest.fixture(scope="module")
def remote(seaweedfs: SeaweedFS, tmp_path_factory: pytest.TempPathFactory) -> Remote:
    base = tmp_path_factory.mktemp("fetch-faults")
    logs, work = base / "logs", base / "work"
    tip, change = write_mixed_partition(logs, TOPIC)
    bucket = seaweedfs.create_bucket("fetch-faults")
    cfg = load_config(
        None,
        log_dirs=[str(logs)],
        work_dir=str(work),
        http={"enabled": False},
        storage=s3_storage(seaweedfs, bucket),
        topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
    )
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    d.stop()
    return Remote(Tiered(logs, work, tip, cfg, change), bucket, work / "metadata")


def reader_config(
    remote: Remote,
    seaweedfs: SeaweedFS,
    proxy: FaultProxy,
    work: Path,
    s3: dict[str, Any] | None = None,
    **read: Any,
) -> DaemonConfig:
    """Read-side config: storage through the proxy with tight timeouts (``s3`` overrides them),
    every read from storage (no chunk cache)."""
    storage = s3_storage(seaweedfs, remote.bucket)
    storage["config"].update(TIGHT_S3, endpoint_url=proxy.endpoint_url, **(s3 or {}))
    return load_config(
        None,
        work_dir=str(work),
        storage=storage,
        metadata={"manager": "file", "config": {"dir": str(remote.metadata_dir)}},
        read={
            "chunk_bytes": 4096,
            "chunk_cache_bytes": 0,
            "read_ahead_chunks": 0,
            "fetch_max_wait_ms": 30_000,
            "http_port": 0,
            **read,
        },
    )


@pytest.fixture
def make_reader(remote: Remote, seaweedfs: SeaweedFS, proxy: FaultProxy, tmp_path: Path) -> Iterator[Any]:
    opened: list[RemoteFetcher] = []

    def make(**read: Any) -> RemoteFetcher:
        f = RemoteFetcher.from_config(
            reader_config(remote, seaweedfs, proxy, tmp_path / f"r{len(opened)}", **read)
        )
        opened.append(f)
        return f

    proxy.clear()
    yield make
    proxy.clear()
    for f in opened:
        f.close()


def records_of(raw: bytes, offset: int) -> list[Rec]:
    return [
        (r.offset, r.key, r.value, r.timestamp)
        for _h, r in iter_records(raw)
        if isinstance(r, Record) and r.offset >= offset
    ]


def fetch_all(f: RemoteFetcher, *, sequential: bool = False) -> list[Rec]:
    out: list[Rec] = []
    end = f.plan(TOPIC, 0).log_end
    offset = 0
    while offset < end:
        r = f.fetch(TOPIC, 0, offset, max_bytes=8192, sequential=sequential, timeout_ms=30_000)
        out += records_of(r.records, offset)
        assert r.next_offset > offset
        offset = r.next_offset
    return out


def fetch_or_typed_error(f: RemoteFetcher, truth: list[Rec], offset: int) -> str:
    """One read: it either returns records equal to the truth from ``offset`` on, or raises a typed
    error; returns the outcome (``ok`` or the error class name)."""
    try:
        r = f.fetch(TOPIC, 0, offset, max_bytes=8192, timeout_ms=30_000)
    except RlmError as e:
        assert isinstance(e, RemoteStorageError | FetchTimeoutError), repr(e)
        assert e.retriable or isinstance(e, FetchTimeoutError), repr(e)
        return type(e).__name__
    got = records_of(r.records, offset)
    start = next(i for i, rec in enumerate(truth) if rec[0] >= offset)
    assert got and got == truth[start : start + len(got)], f"read at {offset} differs from the truth"
    return "ok"


def test_latency_and_slow_bandwidth(make_reader: Any, remote: Remote, proxy: FaultProxy) -> None:
    """30 ms per chunk and 256 KiB/s: random and sequential reads are complete and equal."""
    f = make_reader()
    with proxy.fault(latency_s=0.03, bandwidth=256 * 1024):
        assert fetch_all(f) == remote.truth
        assert fetch_all(f, sequential=True) == remote.truth


def test_connection_resets(make_reader: Any, remote: Remote, proxy: FaultProxy) -> None:
    """Resets mid-body and at connect: each read is equal or a typed retriable error, never fewer records."""
    f, truth = make_reader(), remote.truth
    offsets = sorted({truth[i][0] for i in range(0, len(truth), max(1, len(truth) // 8))})
    with proxy.fault(reset_after_bytes=3000):  # every GET longer than that is cut in the middle
        cut = [fetch_or_typed_error(f, truth, o) for o in offsets[::2]]
    with proxy.fault(reset_new=True):
        proxy.reset_in_flight()
        refused = [fetch_or_typed_error(f, truth, o) for o in offsets[::4]]
    stop = threading.Event()

    def resetter() -> None:  # connections reset at random points of their reads
        while not stop.wait(0.02):
            proxy.reset_in_flight()

    t = threading.Thread(target=resetter, name="resetter", daemon=True)
    t.start()
    try:
        random_cuts = [fetch_or_typed_error(f, truth, o) for o in offsets]
    finally:
        stop.set()
        t.join()
    print("outcomes under random resets:", random_cuts)
    assert set(cut) == {"RemoteStorageError"}, cut
    assert set(refused) == {"RemoteStorageError"}, refused
    assert fetch_all(f) == truth  # and once the fault clears, everything reads back


def test_slowdown_503(make_reader: Any, remote: Remote, proxy: FaultProxy) -> None:
    """503 SlowDown: one is retried away; always 503: max_attempts tries, then a typed retriable error."""
    f, truth = make_reader(), remote.truth
    with proxy.fault(slowdown_count=1):
        assert fetch_all(f) == truth
    assert proxy.stats.slowdowns >= 1
    md = f.plan(TOPIC, 0).segments[0].metadata
    with proxy.fault(slowdown_fraction=1.0):
        before = proxy.stats.slowdowns
        with pytest.raises(RemoteStorageError, match="SlowDown") as e:
            f.rsm.fetch_index(md, IndexType.OFFSET)
        assert e.value.retriable
        assert proxy.stats.slowdowns - before == TIGHT_S3["max_attempts"]  # attempts, not 1 + retries
        outcomes = {fetch_or_typed_error(f, truth, o) for o in (0, truth[len(truth) // 2][0])}
        assert outcomes == {"RemoteStorageError"}, outcomes
    assert fetch_all(f) == truth


def test_blackhole(make_reader: Any, remote: Remote, proxy: FaultProxy) -> None:
    """Storage that never answers: reads end in FetchTimeoutError (no hang) and the pool recovers after."""
    f, truth = make_reader(fetch_max_wait_ms=500, reader_threads=2, reader_max_pending_tasks=4), remote.truth
    with proxy.fault(blackhole=True):
        for offset in (0, truth[len(truth) // 2][0]):
            with pytest.raises(FetchTimeoutError):
                f.fetch(TOPIC, 0, offset)  # the configured remote.fetch.max.wait.ms applies
        assert proxy.stats.blackholed >= 1
    wait_for(
        "reads succeed once the fault cleared", lambda: fetch_or_typed_error(f, truth, 0) == "ok", timeout=30
    )
    wait_for("reader pool drained", lambda: f.pool.in_use == 0, timeout=30)
    assert fetch_all(f) == truth


def test_http_api_answers_typed_json(
    remote: Remote, seaweedfs: SeaweedFS, proxy: FaultProxy, tmp_path: Path
) -> None:
    """HTTP API under 503 SlowDown and a blackhole: JSON 503 with Retry-After, JSON 504, 200 after."""
    # one attempt per request (a 503 answers at once), storage timeouts longer than the read's.
    # The read's 3 s leave room for the first read's own set-up (a storage client per reader
    # thread, the plan): with 1 s a CI run on a loaded 2-core machine answered 504 for the 503.
    s3 = {"max_attempts": 1, "read_timeout": 10.0}
    cfg = reader_config(remote, seaweedfs, proxy, tmp_path / "http", s3, fetch_max_wait_ms=3000)
    server = HttpApiServer.from_config(cfg).start()
    url = f"http://127.0.0.1:{server.port}/v1/topics/{TOPIC}/partitions/0/records"
    try:
        with proxy.fault(slowdown_fraction=1.0):
            r = requests.get(url, params={"offset": 0}, timeout=60)
            assert r.status_code == 503, r.text
            assert r.json()["error"] == "storage_unavailable" and r.headers["Retry-After"]
        with proxy.fault(blackhole=True):
            r = requests.get(url, params={"offset": 0}, timeout=60)
            assert r.status_code == 504, r.text
            assert r.json()["error"] == "fetch_timeout"
        wait_for(
            "200 once the fault cleared",
            lambda: requests.get(url, params={"offset": 0}, timeout=60).status_code == 200,
            timeout=30,
        )
        r = requests.get(
            url,
            params={"offset": 0, "max_bytes": 8192},
            timeout=60,
            headers={"Accept": "application/vnd.kafka.record-batches"},
        )
        assert r.status_code == 200
        assert records_of(r.content, 0) == remote.truth[: len(records_of(r.content, 0))] != []
    finally:
        proxy.clear()
        with contextlib.suppress(Exception):
            server.stop()
