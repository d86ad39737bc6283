"""Pure parts of the daemon: epoch rules, the scheduler, the copy quota, the epoch history
(the lineage verdicts: ``test_lineage.py``)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rlm.daemon.context import EpochHistory
from rlm.daemon.quota import CopyQuota
from rlm.daemon.scheduler import PartitionScheduler
from rlm.errors import RlmError
from rlm.lineage import (
    checkpoint_bytes,
    epochs_for_range,
    filtered_epochs,
    find_highest_remote_offset,
)
from rlm.types import KafkaUuid, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)


def md(start: int, end: int, epochs: list[tuple[int, int]]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(TP), start, end, 0, 1, 0, 10, tuple(epochs)
    )


def test_epochs_for_range_matches_kafka() -> None:
    epochs = [(0, 0), (2, 100), (5, 250)]
    assert epochs_for_range(epochs, 50, 150) == [(0, 50), (2, 100)]
    assert epochs_for_range(epochs, 100, 250) == [(2, 100)]
    assert epochs_for_range(epochs, 120, 400) == [(2, 120), (5, 250)]
    assert epochs_for_range([], 7, 9) == [(0, 7)]
    assert filtered_epochs([(0, 0), (1, 10), (2, 10)]) == [(0, 0), (2, 10)]
    assert checkpoint_bytes(epochs, 250) == b"0\n2\n0 0\n2 100\n"


def test_highest_remote_offset_walks_epochs_backwards() -> None:
    epochs = [(0, 0), (2, 100), (5, 250)]
    remote = {0: 99, 2: 180}
    assert find_highest_remote_offset(epochs, 300, remote.get) == (180, 2)
    # remote holds more of epoch 0 than this replica's epoch 0 (divergence): cap at the epoch end
    assert find_highest_remote_offset(epochs, 300, {0: 150}.get) == (99, 0)
    assert find_highest_remote_offset(epochs, 300, {}.get) == (-1, -1)


def test_epoch_history_keeps_what_the_broker_truncated(tmp_path: Path) -> None:
    h = EpochHistory(tmp_path)
    assert h.merge(TP, [(0, 0), (1, 500)]) == [(0, 0), (1, 500)]
    # local retention moved the broker's log start: the checkpoint was truncated from the front
    assert h.merge(TP, [(1, 800), (2, 900)]) == [(0, 0), (1, 500), (2, 900)]
    # an unclean election truncated the tail: the checkpoint wins there
    assert h.merge(TP, [(1, 800), (3, 850)]) == [(0, 0), (1, 500), (3, 850)]


def test_scheduler_backoff_interval_and_exclusivity() -> None:
    runs: dict[str, list[float]] = {"a": [], "b": []}
    active: set[str] = set()
    overlap: list[str] = []
    lock = threading.Lock()

    def task(key: object) -> None:
        k = str(key)
        with lock:
            if k in active:
                overlap.append(k)
            active.add(k)
        runs[k].append(time.monotonic())
        time.sleep(0.01)
        with lock:
            active.discard(k)
        if k == "b":
            raise RlmError("remote down", retriable=True)

    s = PartitionScheduler(
        task, threads=3, interval_s=0.05, backoff_base_s=0.02, backoff_max_s=0.16, jitter=0.0
    )
    s.add("a")
    s.add("b")
    s.start()
    time.sleep(1.2)
    s.remove("a")
    n_after_remove = len(runs["a"])
    time.sleep(0.3)
    assert s.stop(5)
    assert not overlap
    assert len(runs["a"]) <= n_after_remove + 1, "a removed partition is dropped after its run"
    assert [s.backoff(n) for n in range(1, 6)] == [0.02, 0.04, 0.08, 0.16, 0.16], "exponential, capped"
    assert s._entries["b"].failures == len(runs["b"]) >= 3, "every failed run counts towards the backoff"
    assert len(s.errors) == len(runs["b"])
    jittered = PartitionScheduler(
        task, threads=1, interval_s=1, backoff_base_s=1, backoff_max_s=8, jitter=0.2
    )
    assert all(0.8 * 4 <= jittered.backoff(3) <= 1.2 * 4 for _ in range(50))


def test_scheduler_once() -> None:
    seen: list[object] = []
    s = PartitionScheduler(
        seen.append, threads=2, interval_s=10, backoff_base_s=1, backoff_max_s=1, jitter=0.2, once=True
    )
    for k in range(5):
        s.add(k)
    s.start()
    assert s.wait_once(10)
    assert sorted(seen) == [0, 1, 2, 3, 4]  # type: ignore[type-var]
    assert s.stop(5)


def test_copy_quota_token_bucket() -> None:
    now = [0.0]
    q = CopyQuota(1000, clock=lambda: now[0])
    assert q.acquire(1000)  # a full bucket
    stop = threading.Event()
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(q.acquire(500, stop)))
    t.start()
    time.sleep(0.1)
    assert not result, "empty bucket: the next copy waits"
    now[0] = 0.6  # 600 bytes of credit
    t.join(5)
    assert result == [True]
    stop.set()
    assert not q.acquire(10_000, stop), "a stop request interrupts the wait"
    assert CopyQuota(2**63 - 1).acquire(10**12)


def test_librdkafka_lines_are_rate_limited_per_client_and_facility(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    import structlog

    from rlm.logging_setup import configure_logging

    saved = structlog.get_config()
    configure_logging("json", "info")  # into capsys' stderr; restored below
    try:
        _emit_and_check(capsys)
    finally:
        structlog.configure(**saved)
        logging.getLogger("rlm.kafka.test-client").handlers.clear()


def _emit_and_check(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from rlm.logging_setup import RateLimitedKafkaHandler

    now = [0.0]
    handler = RateLimitedKafkaHandler(period_s=30, clock=lambda: now[0])
    lg = logging.getLogger("rlm.kafka.test-client")
    lg.handlers[:] = [handler]
    lg.propagate = False
    for _ in range(500):  # what librdkafka does against an unreachable bootstrap
        lg.error("%s [%s] %s", "FAIL", "rdkafka#producer-1", "Connect to ipv4#127.0.0.1:9 failed")
    lg.warning("%s [%s] %s", "GETPID", "rdkafka#producer-1", "other facility")
    now[0] = 31.0
    lg.error("%s [%s] %s", "FAIL", "rdkafka#producer-1", "Connect to ipv4#127.0.0.1:9 failed")
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    events = [e for e in lines if e["event"] == "kafka_client_log"]
    assert [(e["facility"], e["suppressed"], e["level"]) for e in events] == [
        ("FAIL", 0, "error"), ("GETPID", 0, "warning"), ("FAIL", 499, "error"),
    ]
    assert events[0]["client"] == "rlm.kafka.test-client" and "127.0.0.1:9" in events[0]["message"]


def test_metadata_future_wait_is_bounded() -> None:
    from concurrent.futures import Future

    from rlm.daemon.context import wait_result
    from rlm.errors import MetadataTimeoutError

    never: Future[int] = Future()
    try:
        wait_result(never, 0.05)
    except MetadataTimeoutError as e:
        assert e.retriable and "0.05s" in str(e)
    else:
        raise AssertionError("an unanswered metadata future must time out")
    done: Future[int] = Future()
    done.set_result(7)
    assert wait_result(done, 0.05) == 7 and wait_result(8) == 8


def test_stale_copy_watch_ages_by_monotonic_time_after_first_sight() -> None:
    """Another node's COPY_SEGMENT_STARTED: its age is read from the wall clock once, then advanced
    by the monotonic clock, so wall-clock jumps after first sight change nothing."""
    from rlm.daemon.expiry import StaleCopyWatch

    mono = [100.0]
    watch = StaleCopyWatch(clock=lambda: mono[0])
    wall = 1_000_000_000
    fresh = replace(md(0, 1, [(0, 0)]), event_timestamp_ms=wall - 200)  # 200 ms old at first sight
    assert not watch.abandoned(fresh, 1000, wall)
    assert not watch.abandoned(fresh, 1000, wall + 86_400_000)  # a day's jump forward: still young
    mono[0] += 0.9
    assert watch.abandoned(fresh, 1000, wall - 86_400_000)  # 200 + 900 ms old, whatever the wall says
    old = replace(md(0, 1, [(0, 0)]), event_timestamp_ms=wall - 3_600_000)
    assert watch.abandoned(old, 1000, wall)  # long abandoned at first sight (--once): at once
    future = replace(md(0, 1, [(0, 0)]), event_timestamp_ms=wall + 86_400_000)
    assert not watch.abandoned(future, 1000, wall)  # stamped in our future: counts as new ...
    mono[0] += 1.1
    assert watch.abandoned(future, 1000, wall)  # ... and goes one grace period after first sight
    watch.keep_only(TP, set())  # finished or deleted meanwhile: forgotten
    assert not watch.abandoned(fresh, 1000, wall)


def test_instance_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    from rlm.daemon.instance_lock import InstanceLock
    from rlm.errors import InstanceLockedError

    logs = tmp_path / "logs"
    logs.mkdir()
    first = InstanceLock(tmp_path / "w1", [logs]).acquire()
    with pytest.raises(InstanceLockedError, match=r"w1/rlm.lock: locked by another `rlm run` \(pid \d+\)"):
        InstanceLock(tmp_path / "w1", []).acquire()
    with pytest.raises(InstanceLockedError, match=f"{logs}: locked"):
        InstanceLock(tmp_path / "w2", [logs]).acquire()
    assert sorted(p.name for p in logs.iterdir()) == []  # nothing written into the log dir
    first.release()
    InstanceLock(tmp_path / "w2", [logs]).acquire().release()


def test_clock_seam_ignores_a_garbage_offset_and_reads_a_good_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped RLM_TEST_CLOCK_OFFSET_MS must not make every command fail at import."""
    from rlm.daemon import clock

    monkeypatch.setenv("RLM_TEST_CLOCK_OFFSET_MS", "soon")
    assert clock._env_offset() == 0
    monkeypatch.setenv("RLM_TEST_CLOCK_OFFSET_MS", "86400000")
    assert clock._env_offset() == 86_400_000
