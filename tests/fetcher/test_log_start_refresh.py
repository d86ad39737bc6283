"""The log start's sources are asked off the read path while a partition is being read.

A read whose partition's log start had expired used to wait for the published object's GET (and
the broker's ListOffsets): tens of milliseconds under load, on a consumer's first Fetch, every
``refresh_s`` of a long read and in every Metadata request (measured on the Kafka endpoint's
benchmark against SeaweedFS: up to 112 ms in a Fetch, 50 ms in a Metadata request). These pin
what replaced it (``fetcher.log_start.LogStartSources``): refresh ahead in the background, never
an answer older than ``refresh_s``, one ask at a time per partition. The clock is the test's, so
nothing here depends on how fast the machine is; a source that blocks until the test releases it
shows who waits for it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fetcher.log_start import LogStartSources
from fetcher.planning import PartitionPlan, plan_partition
from rlm.errors import RemoteStorageIntegrityError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rsm_plugins.local import LocalRemoteStorageManager

REFRESH_S = 10.0
WAIT_S = 30.0  # a bound for waits that must end; never reached when the code is right


class GatedStore(LocalRemoteStorageManager):
    """The local plugin, whose log-start reads can be held until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)  # released once per read that reached the gate
        self.reads = 0

    def read_log_start_offset(self, tp: TopicIdPartition) -> int | None:
        self.reads += 1
        self.entered.release()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return super().read_log_start_offset(tp)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plan() -> PartitionPlan:
    tp = TopicIdPartition(KafkaUuid.random(), "orders", 0)
    segs = [
        RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tp), lo, hi, 1_700_000_000_000, 0,
                                 1_700_000_000_001, 1000, ((0, lo),),
                                 RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        for lo, hi in ((0, 999), (1000, 1999), (2000, 2999))
    ]
    return plan_partition(tp, segs)


@pytest.fixture
def store(tmp_path: Path) -> GatedStore:
    s = GatedStore()
    s.configure({"root": str(tmp_path / "remote")})
    return s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sources(store: GatedStore, clock: Clock) -> LogStartSources:
    s = LogStartSources(store, refresh_s=REFRESH_S, clock=clock)
    yield s  # type: ignore[misc]
    store.gate.set()
    s.close()


def _background_done(sources: LogStartSources) -> None:
    """Wait until the background asks caused so far are done."""
    assert sources.settle(WAIT_S)


def test_refresh_ahead_answers_at_once_and_asks_in_the_background(
        store: GatedStore, clock: Clock, sources: LogStartSources) -> None:
    plan = _plan()
    assert sources.get(plan).offset == 0 and sources.asks == 1
    store.write_log_start_offset(plan.tp, 1500)  # DeleteRecords: the daemon publishes the bound
    clock.now += REFRESH_S * 0.4
    assert sources.get(plan).offset == 0  # young: no ask
    assert sources.asks == 1
    store.gate.clear()
    clock.now += REFRESH_S * 0.2  # over half its life: answered now, asked in the background
    assert sources.get(plan).offset == 0
    assert store.entered.acquire(timeout=WAIT_S)  # the background ask is at the (closed) gate
    assert sources.get(plan).offset == 0  # and reads still do not wait for it
    store.gate.set()
    _background_done(sources)
    assert (sources.asks, sources.background_asks) == (2, 1)
    assert sources.get(plan).offset == 1500  # the refreshed answer, dated when it was asked


def test_an_expired_answer_is_never_returned(store: GatedStore, clock: Clock,
                                             sources: LogStartSources) -> None:
    """Past ``refresh_s`` the caller waits for the sources: a bound published in the meantime is
    never missed for longer than ``refresh_s``."""
    plan = _plan()
    sources.get(plan)
    store.write_log_start_offset(plan.tp, 2100)
    store.gate.clear()
    clock.now += REFRESH_S
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(sources.get(plan).offset))
    reader.start()
    assert store.entered.acquire(timeout=WAIT_S)
    reader.join(0.2)
    assert reader.is_alive() and got == []  # held with the gate: it did not take the old answer
    store.gate.set()
    reader.join(WAIT_S)
    assert got == [2100]


def test_callers_of_an_expired_answer_share_one_ask(store: GatedStore, clock: Clock,
                                                    sources: LogStartSources) -> None:
    plan = _plan()
    sources.get(plan)
    store.write_log_start_offset(plan.tp, 1200)
    store.gate.clear()
    clock.now += REFRESH_S * 3
    got: list[int] = []
    readers = [threading.Thread(target=lambda: got.append(sources.get(plan).offset)) for _ in range(8)]
    for r in readers:
        r.start()
    assert store.entered.acquire(timeout=WAIT_S)
    store.gate.set()
    for r in readers:
        r.join(WAIT_S)
    assert got == [1200] * 8
    assert (sources.asks, store.reads) == (2, 2)  # the first read, then one ask for all eight


def test_a_background_ask_that_fails_leaves_the_error_to_the_next_read(
        store: GatedStore, clock: Clock, sources: LogStartSources) -> None:
    plan = _plan()
    sources.get(plan)
    store.write_log_start_offset(plan.tp, 1000)
    store.log_start_path(plan.tp).write_bytes(b"not a log start object")  # corrupt, not missing
    clock.now += REFRESH_S * 0.6
    assert sources.get(plan).offset == 0  # still young enough; its refresh fails in the background
    _background_done(sources)
    assert sources.background_asks == 1
    with pytest.raises(RemoteStorageIntegrityError):
        sources.get(plan)  # the answer was dropped: this read asks and gets the error itself


def test_no_background_asks_after_close(store: GatedStore, clock: Clock,
                                        sources: LogStartSources) -> None:
    plan = _plan()
    sources.get(plan)
    sources.close()
    clock.now += REFRESH_S * 0.6
    assert sources.get(plan).offset == 0
    assert (sources.asks, sources.background_asks, sources._background) == (1, 0, None)


def test_latest_epoch_does_not_ask_for_the_log_start(tmp_path: Path) -> None:
    """A Metadata request needs each partition's latest epoch only: it must not wait for the log
    start's sources (it asked them for every partition, one after another)."""
    from fetcher import RemoteFetcher
    from tests.fetcher._tiered import tier

    tiered = tier(tmp_path)
    with RemoteFetcher.from_config(tiered.config) as f:
        asks = f.log_starts.asks
        epoch = f.latest_epoch("mixed", 0)
        assert f.log_starts.asks == asks  # nothing asked
        assert epoch == f.plan("mixed", 0).latest_epoch >= 0
        assert f.log_starts.asks == asks + 1  # a plan does ask
        assert f.latest_epoch(tiered.tip) == epoch
