"""Start-up preflight: is every dependency usable before the daemon touches anything shared?

Why: a wrong endpoint, bucket or bootstrap used to surface minutes later as per-segment warnings
or thousands of raw librdkafka lines, after the daemon had already created or written the shared
metadata topic. The preflight runs first (``rlm run`` and ``rlm check``), each step bounded by
the configured per-request timeout, in this order:

0. the work dir is (or can be made) a writable directory: the daemon's lock, status file and
   state live there (a read-only mount or a file in its place stops ``rlm run`` at once);
1. every log dir exists and is readable (a typo'd path is a configuration error, not a warning);
2. the node id (configured or from ``meta.properties``);
3. storage: the plugin loads, a read of a segment that cannot exist answers "not found", and a
   tiny synthetic segment can be copied and deleted (bucket exists and is writable; a missing
   bucket names the command that creates it, refused credentials name the credential settings);
4. the Kafka cluster answers (when ``bootstrap_servers`` is set or the topic store is used);
5. the metadata store: the topic exists with the configured partition count (and is not
   compacted), or a validate-only CreateTopics of exactly the daemon's request (partitions,
   replication factor against the live brokers, configs) accepts it; the file store's directory
   is writable.

Nothing is written to the metadata store here. A failure is one line naming the setting.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from rlm.config import DaemonConfig
from rlm.daemon.local_log import read_node_id
from rlm.daemon.probes import (
    BoundedCall,
    LoginFailures,
    admin_client,
    broker_check,
    metadata_topic_check,
    storage_read_check,
    storage_write_check,
)
from rlm.errors import ConfigError, LogFormatError, PreflightError, RlmError
from rlm.plugin_setup import load_rsm, rlmm_settings
from rlm.secrets import reveal_all
from rlmm.loading import builtin_name

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Check:
    """One preflight step: what was checked, the setting it depends on, and the outcome."""

    name: str
    setting: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name:<15} {self.setting}: {self.detail}"


def check_log_dirs(config: DaemonConfig) -> None:
    """Raise :class:`ConfigError` naming the first configured log dir that is missing or unreadable."""
    if not config.log_dirs:
        raise ConfigError(f"{config.source}: log_dirs: no log dir configured")
    for d in config.log_dirs:
        if not d.exists():
            raise ConfigError(f"{config.source}: log_dirs: {str(d)!r} does not exist")
        if not d.is_dir():
            raise ConfigError(f"{config.source}: log_dirs: {str(d)!r} is not a directory")
        if not os.access(d, os.R_OK | os.X_OK):
            raise ConfigError(f"{config.source}: log_dirs: {str(d)!r} is not readable by this user")


def resolve_node_id(config: DaemonConfig) -> int:
    if config.node_id is not None:
        return config.node_id
    errors = []
    for d in config.log_dirs:
        try:
            return read_node_id(d)
        except (LogFormatError, OSError) as e:
            errors.append(str(e))
    raise ConfigError(
        f"{config.source}: node_id is not set and no log dir has a readable meta.properties: "
        + "; ".join(errors)
    )


def check_work_dir(work_dir: Path) -> str:
    """Make ``work_dir`` if needed and write (then remove) a probe file in it, as the daemon's
    lock and status file will; returns what was found, raises ``OSError`` naming the path."""
    work_dir.mkdir(parents=True, exist_ok=True)
    probe = work_dir / f".rlm-check-{os.getpid()}.tmp"
    try:
        probe.write_bytes(b"rlm check\n")
    finally:
        probe.unlink(missing_ok=True)
    return f"{work_dir} writable, {shutil.disk_usage(work_dir).free / 2**20:.0f} MiB free"


_CREDENTIAL_WORDS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "403",
                     "ExpiredToken", "no usable AWS credentials", "InvalidToken")


def storage_hint(config: DaemonConfig, error: str) -> str:
    """What to do about a storage failure, when it is one an operator fixes by hand: the command
    that creates a missing bucket, or the credential settings."""
    c = config.storage.config
    if config.storage.plugin != "s3":
        return ""
    if "NoSuchBucket" in error or ("bucket" in error and "does not exist" in error):
        endpoint = c.get("endpoint_url", c.get("endpoint.url"))
        region = c.get("region")
        cmd = f"aws s3 mb s3://{c.get('bucket')}" + (f" --endpoint-url {endpoint}" if endpoint else "") + (
            f" --region {region}" if region else "")
        return f"; create the bucket first: {cmd}"
    if any(w in error for w in _CREDENTIAL_WORDS):
        return ("; the store refused the credentials: check storage.config.access_key_id / "
                "secret_access_key (or the AWS_* environment, profile or instance role they default to)")
    return ""


def _storage_setting(config: DaemonConfig, error: str) -> str:
    """The storage setting a failure most likely points at, with its value."""
    c = config.storage.config
    if config.storage.plugin == "s3":
        if any(w in error for w in _CREDENTIAL_WORDS[:3] + _CREDENTIAL_WORDS[5:]):
            return "storage.config.access_key_id"
        if any(w in error for w in ("bucket", "NoSuchBucket", "AccessDenied", "Forbidden")):
            return f"storage.config.bucket = {c.get('bucket')!r}"
        return f"storage.config.endpoint_url = {c.get('endpoint_url', c.get('endpoint.url'))!r}"
    for key in ("root", "dir", "url", "path"):
        if key in c:
            return f"storage.config.{key} = {c[key]!r}"
    return f"storage.plugin = {config.storage.plugin!r}"


class Preflight:
    """Runs the checks; ``rsm`` is the loaded storage plugin for the daemon to keep using."""

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.checks: list[Check] = []
        self.rsm: Any = None
        self.node_id: int | None = None
        self._storage_call = BoundedCall("rlm-preflight-storage", config.storage_request_timeout_ms / 1000)

    def _add(self, name: str, setting: str, ok: bool, detail: str) -> bool:
        self.checks.append(Check(name, setting, ok, detail))
        (log.info if ok else log.error)("preflight_check", check=name, setting=setting, ok=ok, detail=detail)
        return ok

    def run(self) -> list[Check]:
        """Every check that can run (one failing does not hide the independent others)."""
        cfg = self.config
        try:
            self._add("work dir", "work_dir", True, check_work_dir(cfg.work_dir))
        except OSError as e:
            from rlm.environment import describe_os_error

            self._add("work dir", "work_dir", False, describe_os_error(e))
        try:
            check_log_dirs(cfg)
            self._add("log dirs", "log_dirs", True, ", ".join(str(d) for d in cfg.log_dirs))
        except ConfigError as e:
            self._add("log dirs", "log_dirs", False, str(e).removeprefix(f"{cfg.source}: log_dirs: "))
        else:
            try:
                self.node_id = resolve_node_id(cfg)
                self._add("node id", "node_id", True, str(self.node_id))
            except ConfigError as e:
                self._add("node id", "node_id", False, str(e).removeprefix(f"{cfg.source}: node_id "))
        self._storage(self.node_id if self.node_id is not None else -1)
        self._kafka()
        return self.checks

    def raise_first_failure(self) -> None:
        for c in self.checks:
            if not c.ok:
                raise PreflightError(f"preflight failed ({self.config.source}): {c.setting}: {c.detail}")

    def _storage(self, node_id: int) -> None:
        cfg = self.config
        try:
            self.rsm = load_rsm(cfg, node_id)
        except ConfigError as e:
            self._add("storage", "storage.config (rsm.config.*)", False, str(e))
            return
        except RlmError as e:
            self._add("storage", f"storage.plugin = {cfg.storage.plugin!r}", False, str(e))
            return
        for what, fn in (("storage read", storage_read_check), ("storage write", storage_write_check)):
            if what == "storage write" and self.rsm.read_only:
                # never probe-copy into storage a broker owns; `rlm run` cannot start on it
                self._add(what, f"storage.plugin = {cfg.storage.plugin!r}", False,
                          f"the {self.rsm.display_name} layout is read-only: its objects belong to the "
                          "broker's own tiered storage, so `rlm run` never copies into it; use this "
                          "configuration with the read commands (fetch, offsets, serve, backfill, verify)")
                return
            try:
                where = self._storage_call(lambda fn=fn: fn(self.rsm))  # type: ignore[misc]
            except Exception as e:
                detail = f"{type(e).__name__}: {e}"
                self._add(what, _storage_setting(cfg, detail), False, detail + storage_hint(cfg, detail))
                return
            done = "reachable" if what == "storage read" else f"copied and deleted a probe segment ({where})"
            self._add(what, f"storage.plugin = {cfg.storage.plugin!r}", True, done)

    def _kafka(self) -> None:
        cfg = self.config
        timeout = cfg.metadata_request_timeout_ms / 1000
        kind = builtin_name(cfg.metadata.manager)
        broker_ok = True
        if cfg.bootstrap_servers:
            broker_ok = self._broker("bootstrap_servers", cfg.bootstrap_servers, cfg.kafka_client, timeout)
        if kind == "topic":
            self._topic_store(timeout, broker_ok)
        elif kind == "file":
            d = Path(str(rlmm_settings(cfg, self.node_id or -1)["dir"]))
            try:
                d.mkdir(parents=True, exist_ok=True)
                ok = os.access(d, os.W_OK | os.X_OK)
            except OSError as e:
                ok, d = False, Path(f"{d} ({e.strerror})")
            self._add("metadata", "metadata.config.dir", ok, f"{d} {'writable' if ok else 'not writable'}")
        else:
            self._add("metadata", "metadata.manager", True, f"{cfg.metadata.manager}: not checked (custom)")

    def _broker(self, setting: str, bootstrap: str, client: dict[str, Any], timeout: float) -> bool:
        try:
            failures = LoginFailures()
            conf = {"bootstrap.servers": bootstrap, **reveal_all(client)}
            admin = admin_client(conf, "preflight", failures)
            n = broker_check(admin, timeout, failures)
        except Exception as e:
            return self._add("kafka", f"{setting} = {bootstrap!r}", False, str(e))
        return self._add("kafka", f"{setting} = {bootstrap!r}", True, f"{n} broker(s) answered")

    def _topic_store(self, timeout: float, broker_ok: bool) -> None:
        from rlmm.topic_config import TopicRlmmConfig

        cfg = self.config
        try:
            tcfg = TopicRlmmConfig.from_mapping(rlmm_settings(cfg, self.node_id or -1))
        except RlmError as e:
            self._add("metadata topic", "metadata.config", False, str(e))
            return
        setting = f"metadata topic {tcfg.topic_name!r}"
        if tcfg.bootstrap_servers != cfg.bootstrap_servers or not broker_ok:
            if not broker_ok and tcfg.bootstrap_servers == cfg.bootstrap_servers:
                self._add("metadata topic", setting, False, "not checked: the cluster did not answer")
                return
            if not self._broker(
                "metadata bootstrap.servers", tcfg.bootstrap_servers, tcfg.admin_config(), timeout
            ):
                return
        try:
            failures = LoginFailures()
            admin = admin_client(tcfg.admin_config(), "preflight", failures)
            state = metadata_topic_check(admin, tcfg, timeout, failures)
        except Exception as e:
            self._add("metadata topic", setting, False, str(e))
            return
        self._add("metadata topic", setting, True, state)
