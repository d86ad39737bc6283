"""The remote read quota (remote.log.manager.fetch.max.bytes.per.second) and config aliases."""

from __future__ import annotations

import pytest

import fetcher.reader as reader_mod
from fetcher.reader import ByteRateLimiter
from rlm.config import load_config


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_limiter_spreads_bytes_over_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(reader_mod, "time", clock)
    lim = ByteRateLimiter(1000)
    lim.acquire(1000)  # the first second's budget
    assert clock.slept == []
    lim.acquire(500)
    assert clock.slept == [pytest.approx(0.5)]
    lim.acquire(2000)  # a read larger than a second's budget waits proportionally
    assert clock.slept[-1] == pytest.approx(2.0)
    total_bytes, total_time = 3500, clock.now - 100.0
    assert total_bytes / (total_time + 1) <= 1000  # never above the rate (+1 s initial burst)


def test_unlimited_by_default_and_kafka_names() -> None:
    cfg = load_config(None, **{"remote.log.reader.threads": 3, "remote.log.reader.max.pending.tasks": 7,
                               "remote.fetch.max.wait.ms": 900,
                               "remote.log.manager.fetch.max.bytes.per.second": 4096})
    assert (cfg.read.reader_threads, cfg.read.reader_max_pending_tasks, cfg.read.fetch_max_wait_ms,
            cfg.read.fetch_max_bytes_per_second) == (3, 7, 900, 4096)
    assert ByteRateLimiter(load_config(None).read.fetch_max_bytes_per_second).unlimited
