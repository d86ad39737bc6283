"""Per-partition status, kept in memory by the tasks and written to ``<work_dir>/status.json``.

``rlm status`` reads the file, so it works without talking to the daemon (and after it exits).
The file is replaced atomically (write + fsync + rename), never half-written.

A restarted daemon starts from the partitions its previous run wrote (their ranges, segments and
bytes are still what storage and the metadata store hold) instead of empty entries, each with the
note :data:`CARRIED_NOTE` until its first run in this process looks at it again; entries for
partitions no longer found on this node are dropped at the first refresh. Without this, a
restarted daemon's status showed ``-1`` ranges and 0 segments for tiered partitions during its
first pass, and kept them after a stop in the middle of it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlm.daemon.clock import wall_ms
from rlm.daemon.workdir import atomic_write
from rlm.errors import ConfigError

STATUS_FILE = "status.json"
CARRIED_NOTE = "as of the previous run: not looked at again yet"
#: how every reason a partition is not protected starts (discovery's refusals are written so too)
NOT_PROTECTED = "NOT PROTECTED"


@dataclass
class PartitionStatus:
    """What ``rlm status`` shows for one partition; offsets are -1 when unknown."""

    topic: str
    partition: int
    topic_id: str = ""
    role: str = "leader"
    tiered: bool = True
    local_start: int = -1
    local_end: int = -1
    lso: int = -1
    remote_start: int = -1
    log_start: int = -1  # DeleteRecords bound the daemon published (-1: none); see rlm/daemon/log_start.py
    remote_end: int = -1
    remote_segments: int = 0
    remote_bytes: int = 0
    copy_lag: int = 0
    last_copy_ms: int = -1
    last_run_ms: int = -1
    last_error: str | None = None
    last_error_ms: int = -1
    gap_offsets: int = 0
    gaps: list[list[int]] = field(default_factory=list)  # [first, last] offset ranges never copied
    # off-lineage segments kept for now: [segment id, first offset, last offset, delete-after ms]
    quarantined: list[list[int | str]] = field(default_factory=list)
    note: str | None = None
    # the last remote compaction (rlm/daemon/remote_compaction.py): offsets, segments, bytes, records
    compaction: dict[str, int] | None = None
    # the remote compaction running now, if any (rlm/daemon/compaction_progress.py): phase, range, progress
    compaction_running: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.topic}-{self.partition}"


def unprotected_reason(p: PartitionStatus) -> str | None:
    """Why the sidecar is not protecting ``p`` right now (``NOT PROTECTED: ...``), or None.

    Unprotected means data the configuration asks to keep in remote storage may be lost when the
    broker's local retention deletes it: the daemon's discovery refused the partition (``tiered``
    false: topic id unknown beside a broker before 2.8, a ``partition.metadata`` it cannot read),
    or this node leads it and its last run failed (copy failing: storage, metadata store or broker
    unreachable, a corrupt segment); the run is retried with backoff and a run that succeeds
    clears the error. A follower's or a gone partition's error is not this node's to protect.
    """
    if not p.tiered:
        why = p.last_error or "not tiered"
        return why if why.startswith(NOT_PROTECTED) else f"{NOT_PROTECTED}: {why}"
    if p.role == "leader" and p.last_error:
        return f"{NOT_PROTECTED}: its last run failed (retried with backoff): {p.last_error}"
    return None


@dataclass
class DaemonStatus:
    """The whole status file."""

    node_id: int | None = None
    pid: int = 0
    started_ms: int = 0
    updated_ms: int = 0
    state: str = "starting"
    http_port: int | None = None
    partitions: dict[str, PartitionStatus] = field(default_factory=dict)
    untiered: dict[str, str] = field(default_factory=dict)  # topic -> why it is not tiered
    host: str = ""
    proc_start: str = ""  # /proc/<pid>/stat start time: tells a reused pid from ours
    heartbeat_ms: int = 0  # the file is rewritten at least this often while the daemon runs
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)  # dependency -> error, since_ms


class StatusBoard:
    """Thread-safe in-memory status plus its file; tasks update entries, ``flush()`` writes the file."""

    def __init__(self, work_dir: Path, node_id: int | None) -> None:
        self.path = work_dir / STATUS_FILE
        self._lock = threading.Lock()
        self.status = DaemonStatus(
            node_id=node_id,
            pid=os.getpid(),
            started_ms=wall_ms(),
            host=socket.gethostname(),
            proc_start=process_start(os.getpid()),
        )
        self.status.partitions = carried_over(work_dir)
        self._carried = set(self.status.partitions)

    def settle_carried(self, present: set[str]) -> None:
        """First refresh: drop carried-over entries of partitions not on this node any more."""
        with self._lock:
            for key in self._carried - present:
                self.status.partitions.pop(key, None)
            self._carried = set()

    def partition(self, topic: str, partition: int) -> PartitionStatus:
        with self._lock:
            key = f"{topic}-{partition}"
            st = self.status.partitions.get(key)
            if st is None:
                st = PartitionStatus(topic, partition)
                self.status.partitions[key] = st
            return st

    def drop(self, topic: str, partition: int) -> None:
        with self._lock:
            self.status.partitions.pop(f"{topic}-{partition}", None)

    def set_untiered(self, topics: dict[str, str]) -> None:
        with self._lock:
            self.status.untiered = dict(sorted(topics.items()))

    def set_problems(self, problems: dict[str, tuple[str, int]]) -> None:
        with self._lock:
            self.status.problems = {
                k: {"error": err, "since_ms": since} for k, (err, since) in sorted(problems.items())
            }

    def set_state(self, state: str) -> None:
        with self._lock:
            self.status.state = state

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            d = asdict(self.status)
        d["updated_ms"] = wall_ms()
        return d

    def flush(self) -> None:
        """Write the file atomically (fsync + rename); :class:`WorkDirError` when the disk is full."""
        data = json.dumps(self.to_dict(), indent=1, sort_keys=True).encode()
        atomic_write(self.path, data, fsync=True)


def process_start(pid: int) -> str:
    """The kernel's start time of ``pid`` (field 22 of ``/proc/<pid>/stat``); "" when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def pid_alive(pid: int, proc_start: str = "") -> bool:
    """True when ``pid`` runs (not a zombie) and, if known, started when the daemon did."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    fields = stat.rsplit(")", 1)[-1].split()
    if fields[0] in ("Z", "X"):
        return False
    return not proc_start or fields[19] == proc_start


def carried_over(work_dir: Path) -> dict[str, PartitionStatus]:
    """The previous run's partitions, noted as carried over ({} without a readable file)."""
    try:
        previous = read_status(work_dir).partitions
    except (ConfigError, TypeError):
        return {}
    for p in previous.values():
        p.note = CARRIED_NOTE
        p.compaction_running = None  # a compaction of the previous run is not running in this one
    return previous


def read_status(work_dir: Path) -> DaemonStatus:
    """Load the status file of the daemon whose work dir is ``work_dir``."""
    path = work_dir / STATUS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no status file (has the daemon run with this work_dir?)") from e
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable status file: {e}") from e
    parts = {k: PartitionStatus(**v) for k, v in raw.get("partitions", {}).items()}
    known = {
        k: raw[k]
        for k in (
            "node_id",
            "pid",
            "started_ms",
            "updated_ms",
            "state",
            "http_port",
            "untiered",
            "host",
            "proc_start",
            "heartbeat_ms",
            "problems",
        )
        if k in raw
    }
    return DaemonStatus(partitions=parts, **known)
