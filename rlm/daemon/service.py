"""The daemon: discovery, leadership, per-partition tasks, partition removal, status and metrics.

Lifecycle: ``start()`` loads the plugins, takes a first look at the log dirs and the cluster and
starts the pool; ``stop(timeout)`` stops taking work, lets running copies finish within
``timeout`` (a copy still running after that is abandoned: its COPY_SEGMENT_STARTED is undone by
the next run's expiry), then closes everything in reverse order. ``run_once()`` is ``--once``:
one pass over every managed partition (copy + expiry), pending partition removals, then stop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import structlog

from rlm.config import DaemonConfig, ResolvedTopicConfig
from rlm.daemon.context import EpochHistory, TaskContext, now_ms
from rlm.daemon.copier import SegmentCopier
from rlm.daemon.discovery import (
    FoundPartition,
    TieringPolicy,
    Unprotected,
    resolve_topic_ids,
    scan_log_dirs,
    unknown_id_reason,
)
from rlm.daemon.expiry import RemoteExpirer
from rlm.daemon.health import HealthMonitor
from rlm.daemon.http import MetricsServer
from rlm.daemon.instance_lock import InstanceLock
from rlm.daemon.leadership import Cluster, ClusterUnavailableError, ClusterView
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.metrics import DaemonMetrics
from rlm.daemon.partition_remover import PartitionRemover
from rlm.daemon.pass_summary import PassTracker
from rlm.daemon.preflight import Preflight
from rlm.daemon.quota import CopyQuota
from rlm.daemon.remote_compaction import RemoteCompactor
from rlm.daemon.scheduler import PartitionScheduler
from rlm.daemon.signals import FORCED_CLOSE_S
from rlm.daemon.status import StatusBoard
from rlm.daemon.workdir import atomic_write
from rlm.errors import ConfigError, LogFileGoneError, RlmError, WorkDirError
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm
from rlm.types import KafkaUuid, TopicIdPartition, TopicPartition

log = structlog.get_logger(__name__)

STATUS_FLUSH_MIN_S = 1.0  # coalesced status writes after partition runs: at most one per second


@dataclass(frozen=True)
class Managed:
    """A partition this node tiers: where it lives and its effective topic settings."""

    tp: TopicIdPartition
    found: FoundPartition
    topic_config: ResolvedTopicConfig


def standalone_lso(view: LocalLogView) -> int:
    """LSO from the log itself (no broker): open transactions hold it back; bounded by the HW."""
    from rlm.log import lso as lso_mod

    return int(lso_mod.last_stable_offset(view.pdir))


class Daemon:
    def __init__(self, config: DaemonConfig, *, once: bool = False) -> None:
        self.config = config
        self.once = once
        self.metrics = DaemonMetrics()
        self._managed: dict[TopicIdPartition, Managed] = {}
        self._known_path = config.work_dir / "known-partitions.json"
        self._known: dict[TopicPartition, tuple[KafkaUuid, bool]] = {}  # topic id, led by this node
        self._suspects: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()
        self._view: ClusterView | None = None
        self._last_refresh_ok = 0.0
        self._flush_lock = threading.Lock()
        self._last_flush = -STATUS_FLUSH_MIN_S
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._rlmm_leaders: set[TopicIdPartition] = set()
        self._rlmm_followers: set[TopicIdPartition] = set()
        self.http: MetricsServer | None = None
        self.cluster: Cluster | None = None
        self.ctx: TaskContext | None = None
        self._opened: list[tuple[str, Callable[[], object]]] = []  # closed in reverse order on stop
        self._instance_lock: InstanceLock | None = None  # released last, after the final status write
        self.monitor: HealthMonitor | None = None
        self.passes = PassTracker(self.metrics)  # logs pass_summary when every led partition ran

    # ---- setup -----------------------------------------------------------------------------
    def start(self) -> Daemon:
        """Preflight first (nothing shared is touched if it fails), then plugins, tasks and HTTP.
        If anything fails, whatever was opened (plugins, HTTP server) is closed before raising."""
        try:
            return self._start()
        except BaseException:
            self._close_after_failed_start()
            raise

    def _start(self) -> Daemon:
        cfg = self.config
        # first of all: a second sidecar on this node must not touch storage, metadata or files
        self._instance_lock = InstanceLock(cfg.work_dir, list(cfg.log_dirs)).acquire()
        preflight = Preflight(cfg)
        preflight.run()
        if preflight.rsm is not None:  # closed with the rest if the preflight or anything later fails
            self._opened.append(("rsm", preflight.rsm.close))
        preflight.raise_first_failure()
        assert preflight.node_id is not None
        node_id = preflight.node_id
        cfg.work_dir.mkdir(parents=True, exist_ok=True)
        status = StatusBoard(cfg.work_dir, node_id)
        status.status.heartbeat_ms = 0 if self.once else cfg.health_check_interval_ms  # --once: no beat
        rsm = preflight.rsm
        rlmm = load_rlmm(cfg, node_id)
        self._opened.append(("rlmm", rlmm.close))
        self.ctx = TaskContext(
            cfg, node_id, rsm, rlmm, self.metrics, CopyQuota(cfg.copy_max_bytes_per_second), status
        )
        self.metrics.watch_in_flight(self.ctx.in_flight_started)
        history = self.history = EpochHistory(cfg.work_dir)
        self.copier = SegmentCopier(self.ctx, history)
        self.expirer = RemoteExpirer(self.ctx, history)
        self.compactor = RemoteCompactor(self.ctx, history)
        self.remover = PartitionRemover(self.ctx)
        self.policy = TieringPolicy(cfg)
        self.unprotected = Unprotected(status, self.metrics)
        if cfg.bootstrap_servers:
            self.cluster = Cluster(
                cfg.bootstrap_servers, cfg.kafka_client, timeout_s=cfg.metadata_request_timeout_ms / 1000
            )
            self.ctx.still_leads = self._still_leads
        self._load_known()
        self.scheduler = PartitionScheduler(
            self._run_partition,
            threads=cfg.thread_pool_size,
            interval_s=cfg.task_interval_ms / 1000,
            backoff_base_s=cfg.retry_backoff_ms / 1000,
            backoff_max_s=cfg.retry_backoff_max_ms / 1000,
            jitter=cfg.retry_jitter,
            name="rlm-copy",
            once=self.once,
            on_error=self._on_task_error,
        )
        self.refresh()
        if cfg.http.enabled and not self.once:
            try:
                self.http = MetricsServer(cfg.http.host, cfg.http.port, self.metrics, self.health, self.ready)
            except OSError as e:  # the port is taken (another sidecar, or anything else)
                raise ConfigError(
                    f"{cfg.source}: http.host/http.port: cannot listen on {cfg.http.host}:{cfg.http.port} "
                    f"({e.strerror})") from e
            self.http.start()
            self._opened.append(("http", self.http.stop))
            status.status.http_port = self.http.port
        self.metrics.up.set(1)
        status.set_state("running")
        self.scheduler.start()
        if not self.once:
            self.monitor = HealthMonitor(self.ctx, self._flush_status)
            self.monitor.start()
            self._spawn("rlm-refresh", self._refresh_loop)
            self._spawn("rlm-remover", self._remover_loop)
        self._flush_status()
        log.info(
            "daemon_started",
            node_id=node_id,
            log_dirs=[str(d) for d in cfg.log_dirs],
            mode="broker" if self.cluster else "standalone",
            partitions=len(self._managed),
            storage=cfg.storage.plugin,
            metadata=cfg.metadata.manager,
            once=self.once,
        )
        return self

    def _spawn(self, name: str, target: Any) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # ---- known partitions (for deletion after a restart) -------------------------------------
    def _load_known(self) -> None:
        try:
            raw = json.loads(self._known_path.read_text(encoding="utf-8"))
            self._known = {
                TopicPartition(t, int(p)): (KafkaUuid.from_text(i), bool(led)) for t, p, i, led in raw
            }
        except (FileNotFoundError, ValueError, TypeError):
            self._known = {}

    def _save_known(self) -> None:
        data = json.dumps(
            sorted([tp.topic, tp.partition, tid.text, led] for tp, (tid, led) in self._known.items())
        )
        atomic_write(self._known_path, data.encode())

    # ---- discovery + leadership --------------------------------------------------------------
    def refresh(self) -> None:
        """Rescan the log dirs, refresh the cluster view, reconcile tasks and deletions."""
        assert self.ctx is not None
        scan = scan_log_dirs(list(self.config.log_dirs))
        view = self._view
        if self.cluster is not None:
            view = self.cluster.refresh({tp.topic for tp in scan.partitions})
            self._view = view
        self._last_refresh_ok = time.monotonic()
        partitions = resolve_topic_ids(scan.partitions, view)
        managed: dict[TopicIdPartition, Managed] = {}
        followers: set[TopicIdPartition] = set()
        untiered: dict[str, str] = {}
        unprotected: dict[TopicPartition, str] = {}
        for tp, found in partitions.items():
            tcfg = self.policy.topic_config(tp.topic, view)
            why = self.policy.why_not_tiered(tp.topic, tcfg)
            if why is not None:
                untiered[tp.topic] = why
                continue
            if found.topic_id is None:  # a follower's copy is its leader's sidecar's job
                if view is None or view.leaders.get(tp) == self.ctx.node_id:
                    unprotected[tp] = unknown_id_reason(found, self.cluster is not None)
                continue
            tip = TopicIdPartition(found.topic_id, tp.topic, tp.partition)
            leads = view is None or view.leaders.get(tp) == self.ctx.node_id
            if leads:
                managed[tip] = Managed(tip, found, tcfg)
            else:
                followers.add(tip)
        self.ctx.status.set_untiered(untiered)
        present = {f"{t.topic}-{t.partition}" for t in set(managed) | followers}
        self.ctx.status.settle_carried(present | {f"{tp.topic}-{tp.partition}" for tp in unprotected})
        self.unprotected.update(unprotected)
        self._reconcile_deletions(partitions, scan.deleting, view, set(managed), followers)
        leaders = set(managed) | self.remover.pending()
        if leaders != self._rlmm_leaders or followers != self._rlmm_followers:
            self.ctx.rlmm.on_partition_leadership_changes(leaders, followers)
            stopped = (self._rlmm_leaders | self._rlmm_followers) - leaders - followers
            if stopped:
                self.ctx.rlmm.on_stopped_partitions(stopped)
            self._rlmm_leaders, self._rlmm_followers = leaders, followers
        with self._lock:
            gone = set(self._managed) - set(managed)
            self._managed = managed
        for tip in gone:
            self.metrics.forget(tip.topic_partition)
            st = self.ctx.status.partition(tip.topic, tip.partition)
            st.role = "follower" if tip in followers else "gone"
        for tip in followers:
            st = self.ctx.status.partition(tip.topic, tip.partition)
            st.role, st.topic_id = "follower", tip.topic_id.text
            self._learn_epochs(tip, partitions[tip.topic_partition])
        self.metrics.partitions.labels("leader").set(len(managed))
        self.metrics.partitions.labels("follower").set(len(followers))
        self.scheduler.sync(managed)

    def _learn_epochs(self, tip: TopicIdPartition, found: FoundPartition) -> None:
        """A follower remembers its broker's epochs too: if it leads again after local retention
        truncated them, it still knows where the epochs it saw began (:class:`EpochHistory`)."""
        try:
            epochs = [(e.epoch, e.start_offset) for e in PartitionDir(found.dir).leader_epochs()]
        except (RlmError, ValueError, OSError) as e:  # the broker may be rewriting or removing it
            log.debug("follower_epochs_unreadable", topic=tip.topic, partition=tip.partition, error=str(e))
            return
        if epochs:
            self.history.merge(tip, epochs)

    def _still_leads(self, tip: TopicIdPartition) -> bool:
        """Asked before a copy is marked FINISHED: the cluster's answer now, or the last view."""
        assert self.cluster is not None and self.ctx is not None
        try:
            leader = self.cluster.leader_of(tip.topic_partition)
        except ClusterUnavailableError as e:
            view = self._view
            leader = view.leaders.get(tip.topic_partition, -1) if view is not None else -1
            log.warning(
                "leader_check_failed",
                topic=tip.topic,
                partition=tip.partition,
                error=str(e),
                last_known_leader=leader,
            )
        return leader == self.ctx.node_id

    def _reconcile_deletions(
        self,
        found: dict[TopicPartition, FoundPartition],
        deleting: set[TopicPartition],
        view: ClusterView | None,
        leaders: set[TopicIdPartition],
        followers: set[TopicIdPartition],
    ) -> None:
        """Mark deleted partitions for removal; only the node that led a partition last does it."""
        assert self.ctx is not None
        changed = False
        for tip in leaders | followers:
            entry = (tip.topic_id, tip in leaders)
            if self._known.get(tip.topic_partition) != entry:
                self._known[tip.topic_partition] = entry
                changed = True
        for tp, (tid, led) in list(self._known.items()):
            live = found.get(tp)
            if live is not None and live.topic_id == tid:
                continue
            if view is not None:
                deleted = view.complete and not view.topic_exists(tp.topic, tid)
            else:
                deleted = tp in deleting or (live is not None and live.topic_id != tid)
            if not deleted:
                self._suspects.pop(tp, None)
                continue
            # one refresh is not enough evidence to delete remote data: wait for a second one
            self._suspects[tp] = self._suspects.get(tp, 0) + 1
            if self._suspects[tp] < 2:
                continue
            del self._suspects[tp]
            if not led:  # the leader's sidecar removes it; followers only forget it
                del self._known[tp]
                changed = True
                continue
            tip = TopicIdPartition(tid, tp.topic, tp.partition)
            log.info("partition_deleted_detected", topic=tp.topic, partition=tp.partition, topic_id=tid.text)
            if tip not in self._rlmm_leaders:
                self.ctx.rlmm.on_partition_leadership_changes(
                    self._rlmm_leaders | {tip}, self._rlmm_followers
                )
                self._rlmm_leaders = self._rlmm_leaders | {tip}
            self.remover.mark(tip)
            del self._known[tp]
            self.ctx.status.drop(tp.topic, tp.partition)
            changed = True
        if changed:
            self._save_known()

    def _refresh_loop(self) -> None:
        assert self.ctx is not None
        period = min(self.config.rescan_interval_ms, self.config.leadership_refresh_interval_ms) / 1000
        while not self.ctx.stop.wait(period):
            error: str | None = None
            try:
                self.refresh()
            except Exception as e:
                self.metrics.error(e, "refresh")
                log.warning("refresh_failed", error=str(e), kind=type(e).__name__)
                error = f"{type(e).__name__}: {e}"
            if self.monitor is not None and self.cluster is not None:
                self.monitor.set_external("cluster", error)
            self._flush_status()

    def _remover_loop(self) -> None:
        assert self.ctx is not None
        period = self.config.partition_remover_interval_ms / 1000
        while not self.ctx.stop.is_set():
            self.remover.wakeup.wait(period)
            self.remover.wakeup.clear()
            if self.ctx.stop.is_set():
                return
            self.remover.run_once()
            self._flush_status()

    # ---- one partition run ----------------------------------------------------------------------
    def _run_partition(self, key: Hashable) -> None:
        assert self.ctx is not None and isinstance(key, TopicIdPartition)
        with self._lock:
            m = self._managed.get(key)
        if m is None:
            return
        ctx = self.ctx
        started = time.monotonic()
        st = ctx.status.partition(key.topic, key.partition)
        st.topic_id, st.role, st.tiered, st.note = key.topic_id.text, "leader", True, None
        raised = False
        try:
            try:
                view = LocalLogView.load(m.found.dir)
            except LogFileGoneError:
                log.info("partition_dir_gone", topic=key.topic, partition=key.partition, dir=str(m.found.dir))
                return
            if view.topic_id is not None and view.topic_id != key.topic_id:
                return
            lso = (
                self.cluster.last_stable_offset(key.topic_partition) if self.cluster else standalone_lso(view)
            )
            st.local_start, st.local_end, st.lso = view.local_start_offset, view.log_end_offset(), lso
            labels = (key.topic, str(key.partition))
            self.metrics.local_size.labels(*labels).set(view.size_bytes)
            self.metrics.local_segments.labels(*labels).set(len(view.segments))
            self.copier.run(key, view, lso, m.topic_config)
            if not ctx.stop.is_set():  # replacements finished (any topic) and compaction (compacted ones)
                self.compactor.run(key, view, lso, m.topic_config)
            if not ctx.stop.is_set():
                res = self.expirer.run(key, view, lso, m.topic_config)
                st.remote_start, st.remote_end = res.remote_start, res.remote_end
                st.remote_bytes, st.remote_segments = res.remote_bytes, res.remote_segments
                st.gaps = [list(g) for g in res.gaps]
                st.gap_offsets = sum(b - a + 1 for a, b in res.gaps)
                self.metrics.remote_log_size.labels(*labels).set(res.remote_bytes)
                self.metrics.remote_segments.labels(*labels).set(res.remote_segments)
            st.last_error = None
        except BaseException:
            raised = True  # counted by _on_task_error, with the failure
            raise
        finally:
            if not raised:
                self._count_pass(key, failed=False)
            st.last_run_ms = now_ms()
            self.metrics.task_duration.labels("partition").observe(time.monotonic() - started)
            self._flush_status(coalesce=True)

    def _count_pass(self, key: Hashable, *, failed: bool) -> None:
        with self._lock:
            managed: set[Hashable] = set(self._managed)
        self.passes.ran(key, managed, failed=failed)

    def _on_task_error(self, key: Hashable, exc: BaseException) -> None:
        assert self.ctx is not None
        self.metrics.error(exc, "partition")
        self._count_pass(key, failed=True)
        if isinstance(key, TopicIdPartition):
            st = self.ctx.status.partition(key.topic, key.partition)
            st.last_error = f"{type(exc).__name__}: {exc}"
            st.last_error_ms = now_ms()
            self._flush_status(coalesce=True)

    def _flush_status(self, *, coalesce: bool = False) -> None:
        """Write the status file. ``coalesce`` (after each partition run): at most once per
        :data:`STATUS_FLUSH_MIN_S`, since a write serializes every partition's status (with 1,000
        partitions a write per run made a pass quadratic: ~100 ms per run); a skipped write is
        done by the next one, the refresh loop's (every ``min(rescan, leadership refresh)``
        interval) or ``stop()``'s."""
        if self.ctx is None:
            return
        now = time.monotonic()
        with self._flush_lock:
            if coalesce and now - self._last_flush < STATUS_FLUSH_MIN_S:
                return
            self._last_flush = now
        try:
            self.ctx.status.flush()
        except (OSError, WorkDirError) as e:  # the next flush retries; the old file stays whole
            log.warning("status_write_failed", error=str(e), kind=type(e).__name__)

    # ---- health / lifecycle -------------------------------------------------------------------
    def health(self) -> tuple[bool, dict[str, Any]]:
        """Liveness: False (503) only when stopped or the refresh loop is stuck; an unreachable
        dependency makes it ``degraded`` (still 200: restarting the daemon would not help)."""
        stale_after = (
            3 * max(self.config.rescan_interval_ms, self.config.leadership_refresh_interval_ms) / 1000
        )
        fresh = time.monotonic() - self._last_refresh_ok < stale_after
        with self._lock:
            n = len(self._managed)
        problems = self._problems()
        details: dict[str, Any] = {"partitions": n, "refresh_fresh": fresh, "problems": problems}
        if problems and fresh:
            details["status"] = "degraded"
        return (fresh and not self._stopped.is_set(), details)

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Readiness: running and every dependency (storage, metadata, cluster) answered its last check."""
        problems = self._problems()
        running = self.ctx is not None and not self.ctx.stop.is_set()
        return (running and not problems, {"problems": problems})

    def _problems(self) -> dict[str, Any]:
        if self.monitor is None:
            return {}
        return {k: {"error": e, "since_ms": t} for k, (e, t) in sorted(self.monitor.problems().items())}

    def managed(self) -> list[TopicIdPartition]:
        with self._lock:
            return sorted(self._managed)

    def run_once(self, timeout: float | None = None, interrupt: threading.Event | None = None) -> int:
        """``--once``: every managed partition once, then pending removals; number of failed tasks.
        Setting ``interrupt`` (a signal) ends the wait early and skips the removals."""
        assert self.ctx is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.scheduler.wait_once(0.2):
            if (interrupt is not None and interrupt.is_set()) or (deadline and time.monotonic() > deadline):
                return len(self.scheduler.errors)
        self.remover.run_once()
        return len(self.scheduler.errors)

    def stop(self, timeout: float | None = None, *, force: threading.Event | None = None) -> bool:
        """Stop taking work, wait for running tasks up to ``timeout`` (or until ``force`` is set);
        True if none was abandoned. The plugins are closed either way: after abandoned copies,
        within :data:`FORCED_CLOSE_S` (a copy still running may then fail; it is undone by the
        next run's expiry)."""
        if self.ctx is None or self._stopped.is_set():
            return True
        timeout = self.config.shutdown_timeout_s if timeout is None else timeout
        self.ctx.status.set_state("stopping")
        self._flush_status()
        self.ctx.stop.set()
        self.remover.wakeup.set()
        clean = self.scheduler.stop(timeout, abort=force)
        if not clean:
            with self.ctx.in_flight_lock:
                abandoned = [s.id.text for s in self.ctx.in_flight]
            log.warning(
                "copies_abandoned",
                segment_ids=abandoned,
                note="left COPY_SEGMENT_STARTED; undone by the next run's expiry",
            )
        if not (force and force.is_set()):
            for t in self._threads:
                t.join(max(0.1, timeout / 4))
            if self.monitor is not None:
                self.monitor.join(max(0.1, timeout / 4))
        self._close_opened(None if clean else FORCED_CLOSE_S)
        self.metrics.up.set(0)
        self.ctx.status.set_state("stopped")
        self._flush_status()
        self._stopped.set()
        self._release_lock()
        log.info("daemon_stopped", clean=clean, forced=bool(force and force.is_set()))
        return clean

    def _close_opened(self, bound_s: float | None) -> None:
        """Close what :meth:`start` opened, newest first; give up waiting after ``bound_s``."""
        opened, self._opened = self._opened[::-1], []

        def close_all() -> None:
            for name, closer in opened:
                try:
                    closer()
                except Exception as e:
                    log.warning("close_failed", component=name, error=str(e), kind=type(e).__name__)

        if bound_s is None:
            close_all()
            return
        closing = threading.Thread(target=close_all, name="rlm-close", daemon=True)
        closing.start()
        closing.join(bound_s)
        if closing.is_alive():
            log.warning("close_timed_out", seconds=bound_s)

    def _close_after_failed_start(self) -> None:
        if self.ctx is not None:
            self.ctx.stop.set()
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            scheduler.stop(0)
        self._close_opened(FORCED_CLOSE_S)
        if self.ctx is not None:
            self.ctx.status.set_state("failed")
            self._flush_status()
        self._stopped.set()  # a later stop() has nothing left to do
        self._release_lock()

    def _release_lock(self) -> None:
        if self._instance_lock is not None:
            self._instance_lock.release()
            self._instance_lock = None
