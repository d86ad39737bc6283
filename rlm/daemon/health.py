"""Watch storage and metadata while the daemon runs; feed /health, /ready, metrics and ``rlm status``.

Why: copies only call storage when there is something to copy, and a hung call is only noticed
when the plugin's own retries give up, so an outage used to stay invisible for over a minute
("updated 1s ago" with frozen numbers). This monitor probes each dependency every
``health_check_interval_ms`` with a call bounded by the per-request timeout, so an unreachable
store shows up within one interval plus one timeout: ``rlm_dependency_up{dependency=...}`` drops
to 0, ``rlm_errors_total{task="health_<dependency>"}`` counts each failed check, ``/ready``
answers 503 and ``/health`` says ``degraded``, and the status file (rewritten on every round,
which also makes it a heartbeat) carries the current problem until it clears.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from rlm.daemon.context import TaskContext, now_ms
from rlm.daemon.probes import (
    BoundedCall,
    admin_client,
    broker_check,
    metadata_topic_online_check,
    storage_read_check,
)

log = structlog.get_logger(__name__)


class HealthMonitor:
    """Probes storage and metadata on a named thread; ``problems()`` is what is wrong right now."""

    def __init__(self, ctx: TaskContext, on_round: Callable[[], None]) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.interval_s = cfg.health_check_interval_ms / 1000
        self._on_round = on_round
        self._lock = threading.Lock()
        self._problems: dict[str, tuple[str, int]] = {}  # dependency -> (error, since epoch ms)
        self._external: dict[str, tuple[str, int]] = {}
        self._checks: dict[str, Callable[[], Any]] = {"storage": self._check_storage}
        self._calls = {"storage": BoundedCall("rlm-health-storage", cfg.storage_request_timeout_ms / 1000)}
        metadata = self._metadata_check()
        if metadata is not None:
            self._checks["metadata"] = metadata
            self._calls["metadata"] = BoundedCall(
                "rlm-health-metadata", cfg.metadata_request_timeout_ms / 1000
            )
        self._thread: threading.Thread | None = None
        for dep in (*self._checks, "cluster"):
            ctx.metrics.dependency_up.labels(dep).set(1)

    def _metadata_check(self) -> Callable[[], Any] | None:
        """For the topic store: the metadata cluster answers, and every metadata partition has a leader."""
        tcfg = getattr(self.ctx.rlmm, "config", None)
        admin_conf = getattr(tcfg, "admin_config", None)
        if not callable(admin_conf):
            return None
        admin = admin_client(admin_conf(), "health")
        timeout = self.ctx.config.metadata_request_timeout_ms / 1000
        topic = getattr(tcfg, "topic_name", None)

        def check() -> None:
            broker_check(admin, timeout)
            if isinstance(topic, str):
                metadata_topic_online_check(admin, topic, timeout)

        return check

    def _check_storage(self) -> None:
        storage_read_check(self.ctx.rsm)

    # ---- state --------------------------------------------------------------------------------
    def problems(self) -> dict[str, tuple[str, int]]:
        with self._lock:
            return {**self._problems, **self._external}

    def set_external(self, dependency: str, error: str | None) -> None:
        """A problem seen elsewhere (the cluster refresh) that should count for readiness too."""
        with self._lock:
            self._set(self._external, dependency, error)

    def _set(self, table: dict[str, tuple[str, int]], dep: str, error: str | None) -> None:
        was = table.get(dep)
        if error is None:
            if was is not None:
                del table[dep]
                log.info("dependency_recovered", dependency=dep, down_ms=now_ms() - was[1])
            self.ctx.metrics.dependency_up.labels(dep).set(1)
        else:
            table[dep] = (error, was[1] if was else now_ms())
            if was is None:
                log.warning("dependency_unreachable", dependency=dep, error=error)
            self.ctx.metrics.dependency_up.labels(dep).set(0)
        self.ctx.status.set_problems({k: v for k, v in {**self._problems, **self._external}.items()})

    # ---- loop -----------------------------------------------------------------------------------
    def check_once(self) -> None:
        for dep, fn in self._checks.items():
            error: str | None = None
            try:
                self._calls[dep](fn)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                self.ctx.metrics.error(e, f"health_{dep}")
            with self._lock:
                self._set(self._problems, dep, error)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rlm-health", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self.ctx.stop.is_set():
            started = time.monotonic()
            try:
                self.check_once()
            except Exception as e:  # never let the watcher die
                log.warning("health_check_failed", error=str(e), kind=type(e).__name__)
            self._on_round()
            self.ctx.stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
