"""Per-partition status, kept in memory by the tasks and written to ``<work_dir>/status.json``.

``rlm status`` reads the file, so it works without talking to the daemon (and after it exits).
The file is replaced atomically (write + fsync + rename), never half-written.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError

STATUS_FILE = "status.json"


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
    remote_end: int = -1
    remote_segments: int = 0
    remote_bytes: int = 0
    copy_lag: int = 0
    last_copy_ms: int = -1
    last_run_ms: int = -1
    last_error: str | None = None
    last_error_ms: int = -1
    gap_offsets: int = 0
    note: str | None = None

    @property
    def key(self) -> str:
        return f"{self.topic}-{self.partition}"


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


class StatusBoard:
    """Thread-safe in-memory status plus its file; tasks update entries, ``flush()`` writes the file."""

    def __init__(self, work_dir: Path, node_id: int | None) -> None:
        self.path = work_dir / STATUS_FILE
        self._lock = threading.Lock()
        self.status = DaemonStatus(node_id=node_id, pid=os.getpid(), started_ms=int(time.time() * 1000))

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

    def set_state(self, state: str) -> None:
        with self._lock:
            self.status.state = state

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            d = asdict(self.status)
        d["updated_ms"] = int(time.time() * 1000)
        return d

    def flush(self) -> None:
        data = json.dumps(self.to_dict(), indent=1, sort_keys=True).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{STATUS_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


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
        k: raw[k] for k in ("node_id", "pid", "started_ms", "updated_ms", "state", "http_port") if k in raw
    }
    return DaemonStatus(partitions=parts, **known)
