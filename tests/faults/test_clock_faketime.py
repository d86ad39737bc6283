"""The real system clock jumps under a running ``rlm run`` (libfaketime), not the daemon's test seam.

``test_cluster_faults.py`` jumps the clock through ``rlm.daemon.clock``'s offset; here the process's
``clock_gettime(CLOCK_REALTIME)`` itself jumps (libfaketime preloaded, its offset re-read from a file
every second; the monotonic clock is left alone, as an NTP step leaves it), so every reader of
the wall clock in the process — Python's ``time.time``, ``datetime``, the logging timestamps —
sees the jump, whichever code path asks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlm.log.checkpoints import MetaProperties
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, TopicPartition
from tests.daemon.helpers import wait_for

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[2]
DAY_S = 86_400
LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1")


def _libfaketime() -> str:
    """Debian's libfaketime, installed with apt-get when missing (as the deploy checks install promtool)."""
    found = next((p for p in LIBS if Path(p).exists()), None)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "libfaketime"],
                       check=True, env=env, capture_output=True, timeout=900)
        found = next((p for p in LIBS if Path(p).exists()), None)
    if found is None:
        pytest.fail("libfaketime is missing and cannot be installed (needs root and apt-get)")
    return found


def _partition(log_dir: Path, topic: str) -> int:
    """A partition of rolled 32 KiB segments (plus the active one); returns how many are rolled."""
    w = PartitionWriter(log_dir / f"{topic}-0", topic_id=KafkaUuid.random(),
                        config=WriterConfig(segment_bytes=32 * 1024))
    for b in range(60):
        w.append([(f"k{b}-{i}".encode(), b"v" * 90) for i in range(20)], producer_id=7, producer_epoch=0)
    w.close()
    write_log_dir_files(log_dir, [(TopicPartition(topic, 0), w.log_end_offset)],
                        meta=MetaProperties(1, "faketime-cluster-01", 1))
    return len(list((log_dir / f"{topic}-0").glob("*.log"))) - 1


def test_rlm_run_rides_real_wall_clock_jumps(tmp_path: Path) -> None:
    """Real wall clock (libfaketime) a day forward, then back, under `rlm run`: all tiered, none deleted.

    A partition is tiered before the jumps, one appears after the forward jump and one after the
    jump back; each is tiered whole, remote retention (3 days) deletes nothing, no copy is taken for
    abandoned, and the daemon's status file (stamped with its wall clock) shows that its clock did jump.
    """
    lib = _libfaketime()
    logs, work = tmp_path / "logs", tmp_path / "work"
    rolled = {"before": _partition(logs, "before")}
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    cfg = tmp_path / "rlm.yaml"
    storage = {"plugin": "local", "config": {"root": str(tmp_path / "remote"), "fsync": False}}
    metadata = {"manager": "file", "config": {"dir": str(tmp_path / "metadata")}}
    cfg.write_text(yaml.safe_dump({
        "log_dirs": [str(logs)], "work_dir": str(work), "http": {"port": 0}, "task_interval_ms": 200,
        "health_check_interval_ms": 500,
        "storage": storage, "metadata": metadata, "log_format": "json",
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": 3 * DAY_S * 1000}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(LD_PRELOAD=lib, FAKETIME_TIMESTAMP_FILE=str(offset), FAKETIME_CACHE_DURATION="1",
               FAKETIME_DONT_FAKE_MONOTONIC="1", DONT_FAKE_MONOTONIC="1")
    log = tmp_path / "rlm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg)], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        def tiered(topic: str) -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"rlm run exited {proc.returncode}: {log.read_text()[-3000:]}")
            return _remote(tmp_path, storage, metadata, topic)[0] == rolled[topic]

        wait_for("the first partition tiered", lambda: tiered("before"), timeout=90)
        offset.write_text("+1d\n")
        wait_for("the daemon's wall clock a day ahead (its status file's time)",
                 lambda: _status_ms(work) > time.time() * 1000 + DAY_S * 500, timeout=60)
        rolled["ahead"] = _partition(logs, "ahead")
        wait_for("a new partition tiered after the forward jump", lambda: tiered("ahead"), timeout=90)
        offset.write_text("+0\n")
        wait_for("the daemon's wall clock back",
                 lambda: 0 < _status_ms(work) < time.time() * 1000 + DAY_S * 500, timeout=60)
        rolled["back"] = _partition(logs, "back")
        wait_for("a new partition tiered after the jump back", lambda: tiered("back"), timeout=90)
        assert proc.poll() is None, "rlm run is still running"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    for topic, n in rolled.items():
        count, deleted = _remote(tmp_path, storage, metadata, topic)
        assert (count, deleted) == (n, 0), f"{topic}: every rolled segment tiered once, none deleted"
    assert "stale_copy_cleanup" not in text, "no copy taken for abandoned"


def _status_ms(work: Path) -> int:
    """When the daemon last wrote its status file, by its own wall clock (rewritten every heartbeat)."""
    try:
        return int(json.loads((work / "status.json").read_text())["updated_ms"])
    except (OSError, ValueError, KeyError):
        return 0


def _remote(tmp: Path, storage: dict[str, object], metadata: dict[str, object],
            topic: str) -> tuple[int, int]:
    """(segments COPY_SEGMENT_FINISHED, segments past it: deletion started or finished) of ``topic``-0."""
    from rlm.config import load_config
    from rlm.plugin_setup import load_rlmm
    from rlm.types import RemoteLogSegmentState as S

    if not (tmp / "metadata").is_dir():  # the daemon has not opened its store yet
        return 0, 0
    cfg = load_config(None, work_dir=str(tmp / "reader"), storage=storage, metadata=metadata,
                      http={"enabled": False})
    rlmm = load_rlmm(cfg, 1, read_only=True)
    try:
        rlmm.follow_all()
        tp = next((t for t in rlmm.known_partitions() if (t.topic, t.partition) == (topic, 0)), None)
        if tp is None:
            return 0, 0
        states = [md.state for md in rlmm.list_remote_log_segments(tp)]
        return (sum(1 for s in states if s is S.COPY_SEGMENT_FINISHED),
                sum(1 for s in states if s in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)))
    finally:
        rlmm.close()
