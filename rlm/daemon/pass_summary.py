"""What one pass of the daemon did: segments and bytes copied and deleted, the copy lag left.

Why: an operator running ``rlm run --once`` from a shell, or reading the daemon's log, could not
tell what a pass achieved without scraping ``/metrics``. A pass is over when every partition this
node leads has run once since the previous pass ended; the daemon then logs ``pass_summary``
(every pass, with and without ``--once``) and ``rlm run --once`` prints :meth:`PassSummary.human`
when its stdout is a terminal. The numbers are differences of the daemon's own counters
(:class:`rlm.daemon.metrics.DaemonMetrics`), so the log, ``/metrics`` and the summary agree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import asdict, dataclass

import structlog

from rlm.daemon.metrics import DaemonMetrics

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Totals:
    """The daemon's counters at one moment (sums over every partition)."""

    segments_copied: int = 0
    bytes_copied: int = 0
    segments_deleted: int = 0
    bytes_deleted: int = 0

    @classmethod
    def of(cls, m: DaemonMetrics) -> Totals:
        return cls(m.total(m.segments_copied), m.total(m.bytes_copied), m.total(m.segments_deleted),
                   m.total(m.bytes_deleted))


def human_size(n: float) -> str:
    """``n`` bytes for people: ``512 B``, ``1.5 MiB`` (also ``rlm backfill``'s progress line)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


@dataclass(frozen=True)
class PassSummary:
    partitions: int
    failed: int
    seconds: float
    segments_copied: int
    bytes_copied: int
    segments_deleted: int
    bytes_deleted: int
    lag_offsets: int  # offsets of rolled segments below the LSO not copied yet, all partitions
    lag_segments: int
    complete: bool = True  # False: cut short (a stop) before every partition ran

    def human(self) -> str:
        what = "pass" if self.complete else "pass (cut short)"
        failed = f", {self.failed} failed" if self.failed else ""
        return (f"{what}: {self.partitions} partition(s){failed} in {self.seconds:.1f}s: copied "
                f"{self.segments_copied} segment(s), {human_size(self.bytes_copied)}; deleted "
                f"{self.segments_deleted} segment(s), {human_size(self.bytes_deleted)}; copy lag "
                f"{self.lag_offsets} offset(s) in {self.lag_segments} segment(s)")

    def log(self) -> None:
        log.info("pass_summary", **asdict(self))


class PassTracker:
    """Counts partition runs; when every led partition has run, the pass is summarized and logged."""

    def __init__(self, metrics: DaemonMetrics) -> None:
        self.metrics = metrics
        self._lock = threading.Lock()
        self._seen: set[Hashable] = set()
        self._failed: set[Hashable] = set()
        self._start = Totals.of(metrics)
        self._started = time.monotonic()
        self.last: PassSummary | None = None

    def ran(self, key: Hashable, managed: set[Hashable], *, failed: bool) -> PassSummary | None:
        """Note one run of ``key``; returns (and logs) the summary when it ended a pass."""
        with self._lock:
            self._seen.add(key)
            if failed:
                self._failed.add(key)
            if not managed or not self._seen >= managed:
                return None
            summary = self._summary(complete=True)
            self._seen, self._failed = set(), set()
            self._start, self._started = Totals.of(self.metrics), time.monotonic()
            self.last = summary
        summary.log()
        return summary

    def so_far(self) -> PassSummary:
        """The pass under way, as far as it got (for a stop in the middle of it)."""
        with self._lock:
            return self._summary(complete=False)

    def _summary(self, *, complete: bool) -> PassSummary:
        now, m = Totals.of(self.metrics), self.metrics
        return PassSummary(
            partitions=len(self._seen), failed=len(self._failed),
            seconds=time.monotonic() - self._started,
            segments_copied=now.segments_copied - self._start.segments_copied,
            bytes_copied=now.bytes_copied - self._start.bytes_copied,
            segments_deleted=now.segments_deleted - self._start.segments_deleted,
            bytes_deleted=now.bytes_deleted - self._start.bytes_deleted,
            lag_offsets=m.total(m.copy_lag_offsets), lag_segments=m.total(m.copy_lag_segments),
            complete=complete,
        )
