"""The daemon standalone on log dirs written by ``rlm.log.writer`` (embedded defaults: local + file store).

``--once`` vs the long-running daemon, copy gaps, rebuilt producer snapshots, expiry of segments
off the epoch lineage and of abandoned copies, SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import rsm_plugins
from rlm.config import DaemonConfig, load_config
from rlm.daemon.service import Daemon
from rlm.daemon.status import read_status
from rlm.errors import ConfigError
from rlm.exit_codes import ExitCode
from rlm.log.checkpoints import MetaProperties
from rlm.log.partition import PartitionDir
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import (
    IndexType,
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    TopicPartition,
)
from rlmm.file import FileRemoteLogMetadataManager
from tests.daemon.helpers import check_segment_against_local, finished, read_all, wait_for

ROOT = Path(__file__).resolve().parents[2]
SEG = 64 * 1024


def write_partition(
    log_dir: Path,
    topic: str,
    partition: int,
    batches: int,
    *,
    topic_id: KafkaUuid | None = None,
    epoch_change_at: int | None = None,
) -> TopicIdPartition:
    """Idempotent and transactional data (commits and an abort) in 64 KiB segments."""
    tid = topic_id or KafkaUuid.random()
    w = PartitionWriter(
        log_dir / f"{topic}-{partition}", topic_id=tid, config=WriterConfig(segment_bytes=SEG)
    )
    for b in range(batches):
        if epoch_change_at is not None and b == epoch_change_at:
            w.set_leader_epoch(3)
        recs = [(f"k{b}-{i}".encode(), b"v" * 90) for i in range(20)]
        if b % 5 == 4:
            w.append(recs, producer_id=77, producer_epoch=0, transactional=True)
            w.end_transaction(77, 0, commit=b % 15 != 14)
        else:
            w.append(recs, producer_id=11 + partition, producer_epoch=0)
    w.close()
    write_log_dir_files(
        log_dir,
        [(TopicPartition(topic, partition), w.log_end_offset)],
        meta=MetaProperties(1, "standalone-cluster-0001", 1),
    )
    return TopicIdPartition(tid, topic, partition)


def cfg_for(log_dir: Path, work: Path, **extra: Any) -> DaemonConfig:
    base: dict[str, Any] = {
        "log_dirs": [str(log_dir)],
        "work_dir": str(work),
        "task_interval_ms": 200,
        "rescan_interval_ms": 300,
        "http": {"enabled": False},
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
    }
    base.update(extra)
    return load_config(None, **base)


def run_once(cfg: DaemonConfig) -> None:
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    d.stop()


def remote_view(work: Path, tip: TopicIdPartition) -> list[tuple[Any, ...]]:
    m = FileRemoteLogMetadataManager.open(work / "metadata")
    try:
        m.on_partition_leadership_changes({tip}, set())
        return [
            (
                s.start_offset,
                s.end_offset,
                s.segment_size_in_bytes,
                s.max_timestamp_ms,
                s.segment_leader_epochs,
                s.txn_index_empty,
            )
            for s in finished(m, tip)
        ]
    finally:
        m.close()


def test_once_equals_daemon(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    tips = [
        write_partition(logs, "events", p, 300, epoch_change_at=150 if p == 0 else None) for p in range(2)
    ]
    run_once(cfg_for(logs, tmp_path / "once"))
    d = Daemon(cfg_for(logs, tmp_path / "daemon")).start()
    try:
        rlmm = d.ctx.rlmm  # type: ignore[union-attr]
        for tip in tips:
            pdir = PartitionDir(logs / f"{tip.topic}-{tip.partition}")
            want = [s.base_offset for s in pdir.inactive_segments()]
            wait_for(
                "daemon caught up",
                lambda tip=tip, want=want: [m.start_offset for m in finished(rlmm, tip)] == want,
            )
    finally:
        d.stop(10)
    rsm = rsm_plugins.load("local", {"root": str(tmp_path / "once" / "remote")})
    for tip in tips:
        once, daemon = remote_view(tmp_path / "once", tip), remote_view(tmp_path / "daemon", tip)
        assert once == daemon and len(once) >= 8
        pdir = PartitionDir(logs / f"{tip.topic}-{tip.partition}")
        m = FileRemoteLogMetadataManager.open(tmp_path / "once" / "metadata")
        try:
            m.on_partition_leadership_changes({tip}, set())
            for md in finished(m, tip):
                check_segment_against_local(rsm, md, pdir)
        finally:
            m.close()
    epochs = {e for row in remote_view(tmp_path / "once", tips[0]) for e, _ in row[4]}
    assert epochs == {0, 3}

    # identical remote bytes too: compare the two local-plugin trees file by file (names differ by segment id)
    def blobs(root: Path) -> list[bytes]:
        # descriptors name their own segment id, event time and the store's location: not compared
        return sorted(f.read_bytes() for f in root.rglob("*")
                      if f.is_file() and f.suffix not in (".json", ".rlm_descriptor"))

    def descriptors(root: Path) -> int:
        return len(list(root.rglob("*.rlm_descriptor")))

    assert blobs(tmp_path / "once" / "remote") == blobs(tmp_path / "daemon" / "remote")
    assert descriptors(tmp_path / "once" / "remote") == descriptors(tmp_path / "daemon" / "remote") >= 8


def test_gap_is_loud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = tmp_path / "full"
    tip = write_partition(full, "g", 0, 250)
    pfull = PartitionDir(full / "g-0")
    bases = [s.base_offset for s in pfull.segments]
    assert len(bases) >= 8
    logs = tmp_path / "logs"
    shutil.copytree(full, logs)
    pdir = logs / "g-0"

    def drop_from(start: int) -> None:  # files of segments with base >= start (not yet written)
        for f in pdir.iterdir():
            stem = f.name.split(".")[0]
            if (
                stem.isdigit()
                and f.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
                and int(stem) >= start
            ):
                f.unlink()

    def drop_below(end: int) -> None:  # local retention: segments below ``end`` deleted
        for f in pdir.iterdir():
            stem = f.name.split(".")[0]
            if stem.isdigit() and int(stem) < end and f.suffix != ".snapshot":
                f.unlink()

    drop_from(bases[3])  # the broker had written 3 segments: 2 rolled + active
    cfg = cfg_for(logs, tmp_path / "work", log_format="json")
    run_once(cfg)
    assert [r[0] for r in remote_view(tmp_path / "work", tip)] == bases[:2]
    shutil.rmtree(logs)
    shutil.copytree(full, logs)
    drop_below(bases[5])  # segments 2..4 were deleted locally before the daemon copied them
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 0
    gaps = sum(
        s.value for m in d.metrics.gap_segments.collect() for s in m.samples if s.name.endswith("_total")
    )
    d.stop()
    assert gaps == 1
    assert "remote_copy_gap" in capsys.readouterr().out
    status = json.loads((tmp_path / "work" / "status.json").read_text())
    assert status["partitions"]["g-0"]["gap_offsets"] == bases[5] - bases[2]
    assert [r[0] for r in remote_view(tmp_path / "work", tip)] == bases[:2] + bases[5:-1]


def test_missing_producer_snapshot_is_rebuilt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    tip = write_partition(logs, "s", 0, 150)
    pdir = PartitionDir(logs / "s-0")
    second = pdir.segments[2].base_offset
    snap = pdir.snapshot_path(second)
    original = snap.read_bytes()
    snap.unlink()  # the broker has already removed it
    run_once(cfg_for(logs, tmp_path / "work"))
    assert "producer_snapshot_rebuilt" in capsys.readouterr().out
    rsm = rsm_plugins.load("local", {"root": str(tmp_path / "work" / "remote")})
    m = FileRemoteLogMetadataManager.open(tmp_path / "work" / "metadata")
    try:
        m.on_partition_leadership_changes({tip}, set())
        md = next(x for x in finished(m, tip) if x.end_offset == second - 1)
        assert read_all(rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT)) == original
    finally:
        m.close()
    assert not snap.exists(), "never written into the broker's dir"
    assert not any((tmp_path / "work" / "staging").rglob("*.snapshot")), "staging cleaned up"


def test_expiry_cleans_off_lineage_and_abandoned_copies(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    tip = write_partition(logs, "x", 0, 100)
    work = tmp_path / "work"
    run_once(cfg_for(logs, work))
    good = remote_view(work, tip)
    now = int(time.time() * 1000)
    rsm = rsm_plugins.load("local", {"root": str(work / "remote")})
    m = FileRemoteLogMetadataManager.open(work / "metadata")

    def seg(
        start: int, end: int, epochs: tuple[tuple[int, int], ...], broker: int, event: int
    ) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tip), start, end, now, broker, event, 100, epochs
        )

    try:
        m.on_partition_leadership_changes({tip}, set())
        off = seg(0, 10, ((9, 0),), 1, now)  # epoch 9 never existed on this lineage
        m.add_remote_log_segment_metadata(off)
        m.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                off.remote_log_segment_id, now, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
            )
        )
        mine = seg(50, 60, ((0, 50),), 1, now)  # left STARTED by a crash of this node
        recent_other = seg(50, 60, ((0, 50),), 2, now)  # another node, still within the grace period
        old_other = seg(50, 60, ((0, 50),), 2, now - 3_600_000)  # another node, long abandoned
        for s in (mine, recent_other, old_other):
            m.add_remote_log_segment_metadata(s)
    finally:
        m.close()
    def listed() -> dict[RemoteLogSegmentId, RemoteLogSegmentState]:
        m = FileRemoteLogMetadataManager.open(work / "metadata")
        try:
            m.on_partition_leadership_changes({tip}, set())
            return {s.remote_log_segment_id: s.state for s in m.list_remote_log_segments(tip)}
        finally:
            m.close()

    run_once(cfg_for(logs, work))  # the default grace: the off-lineage segment is quarantined, kept
    assert listed()[off.remote_log_segment_id] is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    held = read_status(work).partitions["x-0"].quarantined
    assert [q[:3] for q in held] == [[off.remote_log_segment_id.id.text, 0, 10]]
    run_once(cfg_for(logs, work, off_lineage_grace_ms=0))  # grace over: deleted
    assert read_status(work).partitions["x-0"].quarantined == []
    listed_after = listed()
    assert off.remote_log_segment_id not in listed_after
    assert mine.remote_log_segment_id not in listed_after
    assert old_other.remote_log_segment_id not in listed_after
    assert listed_after[recent_other.remote_log_segment_id] is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert remote_view(work, tip) == good
    del rsm


def test_sigterm_exits_cleanly(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "sig", 0, 200)
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(logs)],
                "work_dir": str(tmp_path / "work"),
                "http": {"port": 0},
                "topic_defaults": {"remote.storage.enable": True},
                "task_interval_ms": 200,
                "remote.log.manager.copy.max.bytes.per.second": 200_000,  # slow: SIGTERM comes mid-way
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg_file)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status_file = tmp_path / "work" / "status.json"

        def copying() -> bool:
            if not status_file.exists():
                return False
            st = json.loads(status_file.read_text())
            return st["state"] == "running" and st["partitions"].get("sig-0", {}).get("remote_end", -1) >= 0

        wait_for("daemon copying", copying, timeout=60)
        port = json.loads(status_file.read_text())["http_port"]
        import urllib.request

        assert b"rlm_up 1.0" in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert '"event": "shutdown_requested"' in err and '"event": "daemon_stopped"' in err
    assert json.loads(status_file.read_text())["state"] == "stopped"


def _start_hanging(tmp_path: Path, shutdown_timeout_s: float) -> tuple[subprocess.Popen[str], Path]:
    logs = tmp_path / "logs"
    write_partition(logs, "hang", 0, 60)
    cfg_file = tmp_path / "rlm.yaml"
    remote = tmp_path / "remote"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(logs)],
                "work_dir": str(tmp_path / "work"),
                "http": {"enabled": False},
                "topic_defaults": {"remote.storage.enable": True},
                "storage": {
                    "plugin": "tests.daemon.slow_rsm:HangingLocalRSM",
                    "config": {"root": str(remote)},
                },
                "shutdown_timeout_s": shutdown_timeout_s,
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg_file)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for("a copy under way", lambda: (remote / ".copy-started").exists(), timeout=60)
    # signal only once the daemon reports itself running (a cold numba cache can delay it)
    wait_for("daemon running", lambda: _status_state(tmp_path) == "running", timeout=180)
    return proc, cfg_file


def _status_state(tmp_path: Path) -> str | None:
    try:
        return str(json.loads((tmp_path / "work" / "status.json").read_text())["state"])
    except (OSError, ValueError, KeyError):
        return None


def test_second_sigterm_forces_exit(tmp_path: Path) -> None:
    """A second SIGTERM does not wait for the hung copy, yet the plugins are closed, the status file
    says stopped, the logs are flushed, and the exit status is the documented 143."""
    proc, _ = _start_hanging(tmp_path, shutdown_timeout_s=600)
    try:
        proc.send_signal(signal.SIGTERM)
        wait_for(
            "shutdown started",
            lambda: json.loads((tmp_path / "work" / "status.json").read_text())["state"] == "stopping",
            timeout=30,
        )
        assert proc.poll() is None, "the first SIGTERM waits for the running copy"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.TERMINATED == 143, err[-2000:]
    assert (tmp_path / "remote" / ".closed").exists(), "the storage plugin was not closed"
    assert (tmp_path / "work" / "metadata" / "metadata.snapshot").exists(), "the file store was not closed"
    assert json.loads((tmp_path / "work" / "status.json").read_text())["state"] == "stopped"
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    order = [events.index(e) for e in ("forced_stop_requested", "daemon_stopped", "forced_stop")]
    assert order == sorted(order), events


def test_once_interrupted_closes_the_plugins_and_exits_143(tmp_path: Path) -> None:
    """``--once`` handles signals too: the hung copy is abandoned after shutdown_timeout_s, the
    plugins are closed, and the status says the pass was cut short."""
    logs = tmp_path / "logs"
    write_partition(logs, "once", 0, 60)
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump({
        "log_dirs": [str(logs)], "work_dir": str(tmp_path / "work"), "shutdown_timeout_s": 1,
        "topic_defaults": {"remote.storage.enable": True},
        "storage": {"plugin": "tests.daemon.slow_rsm:HangingLocalRSM",
                    "config": {"root": str(tmp_path / "remote")}},
    }))
    proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(cfg_file)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("a copy under way", lambda: (tmp_path / "remote" / ".copy-started").exists(), timeout=60)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.TERMINATED, err[-2000:]
    assert (tmp_path / "remote" / ".closed").exists()
    assert '"event": "copies_abandoned"' in err and '"event": "interrupted"' in err


def test_start_failing_late_closes_plugins_and_says_failed(tmp_path: Path) -> None:
    """A failure after the plugins are up (here: the HTTP port is taken) closes them; the status
    file says failed and a later stop() leaves it so."""
    import socket

    logs = tmp_path / "logs"
    write_partition(logs, "late", 0, 5)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = cfg_for(logs, tmp_path / "work", http={"enabled": True, "port": taken.getsockname()[1]},
                      storage={"plugin": "tests.daemon.slow_rsm:HangingLocalRSM",
                               "config": {"root": str(tmp_path / "r")}})
        daemon = Daemon(cfg)
        with pytest.raises(ConfigError, match=r"http\.host/http\.port: cannot listen on"):
            daemon.start()
    assert (tmp_path / "r" / ".closed").exists()
    assert daemon.stop() is True
    assert json.loads((tmp_path / "work" / "status.json").read_text())["state"] == "failed"
    FileRemoteLogMetadataManager.open(tmp_path / "work" / "metadata").close()  # its lock was released


def test_failed_start_closes_the_plugins_and_exits_3(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "bad", 0, 5)
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump({
        "log_dirs": [str(logs)],
        "work_dir": str(tmp_path / "work"),
        "storage": {"plugin": "tests.daemon.slow_rsm:HangingLocalRSM",
                    "config": {"root": str(tmp_path / "r")}},
        "metadata": {"manager": "no_such_package.store:Manager"},
    }))
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(cfg_file)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == ExitCode.CONFIG == 3, res.stderr[-2000:]
    assert "install the package that provides 'no_such_package'" in res.stderr
    assert (tmp_path / "r" / ".closed").exists(), "the storage plugin opened before the failure stays open"

    bad = tmp_path / "bad.yaml"
    bad.write_text("log_dirs: [/d]\nno_such_key: 1\n")
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "run", "--config", str(bad)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == ExitCode.CONFIG and "no_such_key" in res.stderr
    res = subprocess.run([sys.executable, "-m", "rlm.cli", "run", "--no-such-flag"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == ExitCode.USAGE == 2


def test_sigterm_abandons_a_hung_copy_safely(tmp_path: Path) -> None:
    proc, cfg_file = _start_hanging(tmp_path, shutdown_timeout_s=1)
    try:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert '"event": "copies_abandoned"' in err
    # a restart with a working plugin undoes the abandoned COPY_SEGMENT_STARTED and copies everything
    cfg = load_config(cfg_file).model_copy(
        update={"storage": load_config(cfg_file).storage.model_copy(update={"plugin": "local"})}
    )
    run_once(cfg)
    tip_dir = PartitionDir(tmp_path / "logs" / "hang-0")
    tip = TopicIdPartition(tip_dir.topic_id, "hang", 0)
    m = FileRemoteLogMetadataManager.open(tmp_path / "work" / "metadata")
    try:
        m.on_partition_leadership_changes({tip}, set())
        listed = list(m.list_remote_log_segments(tip))
    finally:
        m.close()
    assert [s.start_offset for s in listed] == [s.base_offset for s in tip_dir.inactive_segments()]
    assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in listed)


def test_copy_lag_near_local_retention_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    write_partition(logs, "lag", 0, 60)
    d = Daemon(
        cfg_for(logs, tmp_path / "work", topics=[{"pattern": "lag", "local.retention.ms": 1}]), once=True
    )
    d.start()
    assert d.run_once() == 0
    near = [s.value for m in d.metrics.copy_lag_near_retention.collect() for s in m.samples]
    d.stop()
    assert near == [1.0]
    assert "remote_copy_lag_near_local_retention" in capsys.readouterr().out


def test_oversized_custom_metadata_stops_copying(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    tip = write_partition(logs, "cm", 0, 60)
    cfg = cfg_for(
        logs,
        tmp_path / "work",
        storage={
            "plugin": "tests.daemon.slow_rsm:BigCustomMetadataRSM",
            "config": {"root": str(tmp_path / "remote")},
        },
    )
    d = Daemon(cfg, once=True).start()
    assert d.run_once() == 1
    errors = [str(e) for _, e in d.scheduler.errors]
    d.stop()
    assert "custom metadata" in errors[0] and "200 bytes" in errors[0]
    m = FileRemoteLogMetadataManager.open(tmp_path / "work" / "metadata")
    try:
        m.on_partition_leadership_changes({tip}, set())
        assert not list(m.list_remote_log_segments(tip)), "the upload was undone"
    finally:
        m.close()
    assert not any(f.suffix == ".log" for f in (tmp_path / "remote").rglob("*"))
