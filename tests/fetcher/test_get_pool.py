"""The GET pool runs what a reader waits for before read-ahead, and a promoted GET once."""

from __future__ import annotations

import threading

import pytest

from fetcher.get_pool import GetPool, Priority


def test_demand_before_read_ahead_and_a_promoted_job_runs_once() -> None:
    pool = GetPool(1)
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocker = pool.submit(lambda: gate.wait(30), Priority.DEMAND)  # holds the one worker
        def job(name: str) -> str:
            ran.append(name)
            return name

        jobs = {name: pool.submit(lambda name=name: job(name), prio)  # type: ignore[misc]
                for name, prio in (("ahead-1", Priority.READ_AHEAD), ("ahead-2", Priority.READ_AHEAD),
                                   ("demand", Priority.DEMAND))}
        pool.promote(jobs["ahead-2"])  # a reader now waits for it
        gate.set()
        assert blocker.future.result(30) is True
        assert [jobs[n].future.result(30) for n in ("ahead-1", "ahead-2", "demand")] == [
            "ahead-1", "ahead-2", "demand"]
        assert ran == ["demand", "ahead-2", "ahead-1"]  # promoted ahead of older read-ahead, once
    finally:
        gate.set()
        pool.close()


def test_errors_reach_the_waiter_and_close_cancels_queued_jobs() -> None:
    pool = GetPool(1)
    gate = threading.Event()

    def fail() -> None:
        raise OSError("storage said no")

    try:
        failing = pool.submit(fail, Priority.DEMAND)
        with pytest.raises(OSError, match="storage said no"):
            failing.future.result(30)
        pool.submit(lambda: gate.wait(30), Priority.DEMAND)
        queued = pool.submit(lambda: "never", Priority.READ_AHEAD)
    finally:
        pool.close()
        gate.set()
    assert queued.future.cancelled()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(lambda: None, Priority.DEMAND)
