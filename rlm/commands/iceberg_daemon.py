"""``iceberg.daemon``: ``rlm run`` keeps the configured topics' Iceberg tables in step.

The daemon (``rlm.daemon``) and the read core (``fetcher``) are sibling layers that do not import
each other, so the pairing lives here, beside ``rlm run``, like the read API it can start: one
:class:`IcebergFollower` per process, with a read core and a catalog of its own, running the same
writer as ``rlm iceberg`` (:class:`rlm.tables.IcebergSync`: same ledger, a table property,
so a daemon pass and an ``rlm iceberg`` run can take turns on a table and never add a
segment twice). ``--once`` calls :meth:`IcebergFollower.run_pass` after its copy pass; a running
daemon runs a pass every ``iceberg.daemon.interval_ms`` on a thread. A pass that fails (catalog
down, object store unreachable) is logged and retried at the next one: a table lags, the copies
go on. After each topic's pass the follower runs ``rlm iceberg``'s pass hook too
(:class:`rlm.commands.iceberg_maint.PassHook`): the expiry when ``iceberg.expire_deleted_segments``
is on, and the lag per (table, topic) that ``rlm status`` reads — a table the daemon keeps is
upkept like one ``rlm iceberg --follow`` keeps.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from rlm.config import DaemonConfig
from rlm.errors import ConfigError

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class FollowPass:
    """One pass over the selected topics: segments and rows added per table, errors by topic."""

    added_segments: dict[str, int] = field(default_factory=dict)
    added_rows: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class IcebergFollower:
    """Appends, per selected tiered topic, the remote segments its table does not hold yet."""

    def __init__(self, config: DaemonConfig) -> None:
        try:
            from rlm.tables import open_catalog
        except ImportError as e:
            raise ConfigError("iceberg.daemon needs the `iceberg` extra "
                              f"(pip install 'kafka-rlm-sidecar[iceberg]'): {e}") from None
        from fetcher import RemoteFetcher

        self.config = config
        self.fetcher = RemoteFetcher.from_config(config)
        self.catalog = open_catalog(config)
        self._syncs: dict[str, Any] = {}
        self._hooks: dict[str, Any] = {}  # per topic: rlm iceberg's pass hook (expiry, lag)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def enabled(config: DaemonConfig) -> bool:
        return bool(config.iceberg.daemon.topics)

    def run_pass(self) -> FollowPass:
        """One pass: every selected topic's missing segments, one topic's failure not stopping
        the others."""
        from rlm.commands.iceberg_maint import PassHook
        from rlm.tables import IcebergSync

        out = FollowPass()
        topics = sorted(t for t in self.fetcher.topics() if self.config.iceberg.daemon.selects(t))
        for topic in topics:
            try:
                sync = self._syncs.get(topic)
                if sync is None:
                    sync = IcebergSync(self.fetcher, self.catalog, self.config.iceberg, topic)
                    self._syncs[topic] = sync
                    self._hooks[topic] = PassHook(self.config, self.fetcher, sync, None)
                t0 = time.monotonic()
                r = sync.run_once()
                self._hooks[topic](r, time.monotonic() - t0)
                out.added_segments[topic] = r.added_segments
                out.added_rows[topic] = r.added_rows
                if r.added_segments:
                    log.info("iceberg_daemon_pass", topic=topic, table=sync.identifier,
                             segments=r.added_segments, rows=r.added_rows, waiting=r.waiting)
            except Exception as e:  # a lagging table must not stop the daemon: retried next pass
                self._syncs.pop(topic, None)
                self._hooks.pop(topic, None)
                out.errors[topic] = f"{type(e).__name__}: {e}"
                log.warning("iceberg_daemon_pass_failed", topic=topic, error=str(e), kind=type(e).__name__)
        return out

    def start(self) -> IcebergFollower:
        """A pass every ``interval_ms`` on a thread of its own, until :meth:`stop`."""
        def loop() -> None:
            while not self._stop.is_set():
                self.run_pass()
                if self._stop.wait(self.config.iceberg.daemon.interval_ms / 1000):
                    break

        self._thread = threading.Thread(target=loop, name="rlm-iceberg", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the running pass (a pass cut short leaves orphans at most, never a half
        commit), then close the read core."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.fetcher.close()
