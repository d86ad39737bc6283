"""What the read-side commands (``rlm fetch``, ``rlm offsets``, ``rlm replay``) share.

Timestamp arguments, opening a :class:`fetcher.RemoteFetcher` from ``--config``, one offset
lookup that covers remote and local data, and a progress line on stderr (only when stderr is a
terminal, so scripts and pipes never see it).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rlm.config import load_config
from rlm.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:  # the read core loads when a command reads, not when `rlm --help` registers it
    from fetcher import OffsetAnswer, RemoteFetcher

EARLIEST = -2
LATEST = -1
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)-?ago$", re.IGNORECASE)
# a command waits longer than a broker's fetch (remote.fetch.max.wait.ms, 500 ms): it has no
# consumer to answer in time, and a cold index cache costs a few GETs per segment
CLI_TIMEOUT_MS = 60_000
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_timestamp(text: str, *, now_ms: int | None = None) -> int:
    """Epoch milliseconds from ``earliest`` (-2), ``latest`` (-1), epoch ms, ``2h-ago`` or ISO-8601.

    ISO-8601 without a zone is UTC (as ``kafka-consumer-groups --to-datetime`` takes its
    ``YYYY-MM-DDTHH:mm:SS.sss`` in the local zone, a server's zone is usually UTC; say a zone
    to be sure). Raises :class:`argparse.ArgumentTypeError` so argparse names the option.
    """
    s = text.strip()
    low = s.lower()
    if low == "earliest":
        return EARLIEST
    if low == "latest":
        return LATEST
    if re.fullmatch(r"\d+", s):
        return int(s)
    m = _AGO.match(s)
    if m:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - int(float(m.group(1)) * _UNIT_MS[m.group(2).lower()])
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a timestamp (ISO-8601, epoch ms, e.g. 2h-ago, earliest or latest)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def format_ts(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, or ``-`` for Kafka's -1 (unknown)."""
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", type=Path, required=True,
                   help="the configuration file of `rlm run` (its storage and metadata sections)")


def open_fetcher(config: Path, bootstrap_servers: str | None = None) -> RemoteFetcher:
    """A read-only fetcher built like ``rlm run`` builds its plugins; ``bootstrap_servers``
    overrides the file's (the broker answers lookups past the remote end)."""
    from fetcher import RemoteFetcher
    from rlm.logging_setup import configure_logging

    overrides = {"bootstrap_servers": bootstrap_servers} if bootstrap_servers else {}
    cfg = load_config(config, **overrides)
    # stdout carries the data (raw bytes, Arrow); logs go to stderr, warnings and up only
    configure_logging("console", "debug" if cfg.log_level.lower() == "debug" else "warning")
    # a command reads a few partitions: load only their metadata partitions, when first read
    return RemoteFetcher.from_config(cfg, load_all=False)


def lookup(f: RemoteFetcher, topic: str, partition: int, timestamp: int) -> OffsetAnswer | None:
    """ListOffsets over remote + local. A partition with nothing remote is answered by the
    broker alone (when one is configured); ``latest`` always by the broker when there is one."""
    from fetcher import OffsetAnswer

    try:
        return f.offset_for_timestamp(topic, partition, timestamp, timeout_ms=CLI_TIMEOUT_MS)
    except UnknownTopicOrPartitionError:
        if f.broker is None:
            raise
    got = f.broker.offset_for_timestamp(topic, partition, timestamp)
    return None if got is None else OffsetAnswer(got[0], got[1], got[2], "broker")


def partitions_of(f: RemoteFetcher, topic: str) -> list[int]:
    """Partitions with remote data, plus (with a broker) every partition the broker has."""
    remote = {tp.partition for tp in f.topic_partitions(topic)}
    if f.broker is not None:
        remote |= set(f.broker.partitions(topic))
    if not remote:
        also = "" if f.broker is None else " and is unknown to the broker"
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no remote data{also}")
    return sorted(remote)


class Progress:
    """A one-line, rate-limited progress report on stderr; silent unless stderr is a TTY."""

    def __init__(self, what: str, stream: TextIO | None = None, interval_s: float = 0.25) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.what = what
        self.interval_s = interval_s
        self._last = 0.0
        self._start = time.monotonic()
        self._shown = False

    def update(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        self.stream.write(f"\r\x1b[K{self.what}: {text} ({now - self._start:.1f}s)")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
