"""Process and disk faults against a real broker: kill -9 in the delete protocol, a broker restart
mid-copy, a second sidecar on the same node, and a full work-dir file system.

Every daemon here is a real ``rlm run`` subprocess; every test ends with ``rlm verify --deep``
passing and the stored segments being exactly the ones the metadata names.
"""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from rlm.daemon.crash import DELETE_STEPS
from rlm.exit_codes import ExitCode
from rlm.log.checkpoints import MetaProperties
from rlm.log.partition import PartitionDir
from rlm.log.writer import PartitionWriter, WriterConfig, write_log_dir_files
from rlm.types import KafkaUuid, RemoteLogSegmentState, TopicIdPartition, TopicPartition
from tests.daemon.helpers import create_topic, produce, topic_rlmm, wait_for
from tests.daemon.test_standalone import write_partition
from tests.faults import gated_rsm
from tests.faults.proc_helpers import (
    GATED,
    all_segments,
    caught_up,
    events,
    local_storage,
    read_status_file,
    rlm,
    rolled_end,
    run_once,
    start_daemon,
    stop_daemon,
    stored_segment_ids,
    verify,
    write_config,
)

S = RemoteLogSegmentState
HOUR = 3600 * 1000


def produce_aged(bs: str, topic: str, n: int, ts: int) -> None:
    """``n`` records with CreateTime ``ts``, ``ts + 1``, ...: old enough for ``retention.ms``."""
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2, "batch.size": 16384, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, value=b"a" * 200, key=f"{i}".encode(), partition=0, timestamp=ts + i)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def kafka_config(kafka: Any, topic: str, tmp: Path, name: str = "rlm.yaml", **extra: Any) -> Path:
    work = tmp / "work"
    topic_cfg = {"pattern": topic, "remote.storage.enable": True, **extra.pop("topic_cfg", {})}
    return write_config(
        tmp / name,
        log_dirs=[str(kafka.log_dir)],
        work_dir=str(work),
        bootstrap_servers=kafka.bootstrap,
        storage=extra.pop("storage", local_storage(tmp / "remote")),
        metadata=topic_rlmm(kafka.bootstrap, work),
        topics=[topic_cfg],
        thread_pool_size=1,
        **extra,
    )


def tip_of(pdir_path: Path, topic: str) -> TopicIdPartition:
    return TopicIdPartition(PartitionDir(pdir_path).topic_id, topic, 0)


@pytest.mark.faults
@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("step", DELETE_STEPS)
def test_kill_9_in_delete_protocol_then_restart_deletes_exactly_the_expired(
    kafka: Any, unique_topic: str, tmp_path: Path, step: str
) -> None:
    """kill -9 at each delete step (STARTED, RSM delete, FINISHED): a restart deletes each expired one once.

    The crash lands in a retention delete; after a restart the expired segments are deleted, each
    exactly once (a delete cut short is finished: ``retry_delete``), the kept ones are the same
    segments as before (not re-copied), and storage holds no orphan object.
    """
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce_aged(bs, unique_topic, 7000, int(time.time() * 1000) - 3 * HOUR)  # 1 old segment, and some
    produce(bs, unique_topic, 5000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 3)
    tip = tip_of(pdir_path, unique_topic)
    cfg = kafka_config(kafka, unique_topic, tmp_path)
    first = run_once(cfg)
    assert first.returncode == 0, first.stderr[-3000:]
    before = all_segments(cfg, tip, tmp_path / "r1")
    assert before and all(m.state is S.COPY_SEGMENT_FINISHED for m in before)
    cutoff = int(time.time() * 1000) - HOUR
    expired = {m.remote_log_segment_id.id.text for m in before if m.max_timestamp_ms <= cutoff}
    kept = [m.remote_log_segment_id.id.text for m in before if m.max_timestamp_ms > cutoff]
    assert len(expired) >= 1 and kept, (len(expired), len(kept))

    retention = kafka_config(
        kafka, unique_topic, tmp_path, "retention.yaml", topic_cfg={"retention.ms": HOUR}
    )
    crashed = run_once(retention, RLM_TEST_CRASH_AT=step)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    restarted = run_once(retention)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    deleted = Counter(
        e["segment_id"] for out in (crashed.stderr, restarted.stderr) for e in events(out, "segment_deleted")
    )
    assert set(deleted) <= expired and all(n == 1 for n in deleted.values()), deleted
    retried = [e for e in events(restarted.stderr, "segment_deleted") if e["reason"] == "retry_delete"]
    # a delete cut short before DELETE_FINISHED is finished by the restart (exactly that one segment)
    assert len(retried) == (0 if step == "after_delete_finished" else 1)
    after = all_segments(retention, tip, tmp_path / "r2")
    assert [m.remote_log_segment_id.id.text for m in after] == kept, "the kept segments were not re-copied"
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in after)
    assert stored_segment_ids(tmp_path / "remote") == set(kept)
    report = verify(retention, unique_topic)
    assert report["partitions"][0]["segments"] == len(kept)


def assert_tiered_exactly_once(cfg: Path, tip: TopicIdPartition, pdir_path: Path, reader: Path) -> None:
    """Every rolled segment FINISHED exactly once, nothing else listed, storage = metadata, verify ok."""
    segs = all_segments(cfg, tip, reader)
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in segs), [m.state for m in segs]
    want = [s.base_offset for s in PartitionDir(pdir_path).inactive_segments()]
    assert [m.start_offset for m in segs] == want, "every rolled segment tiered exactly once"
    root = Path(json.loads(json.dumps(yaml_storage_root(cfg))))
    assert stored_segment_ids(root) == {m.remote_log_segment_id.id.text for m in segs}, "no orphan"
    verify(cfg, tip.topic)


def yaml_storage_root(cfg: Path) -> str:
    import yaml

    return str(yaml.safe_load(cfg.read_text())["storage"]["config"]["root"])


@pytest.mark.faults
@pytest.mark.kafka
@pytest.mark.slow
def test_broker_restart_mid_copy_converges(kafka: Any, unique_topic: str, tmp_path: Path) -> None:
    """Broker restart while a copy is mid-upload: the daemon rides it out and tiers every segment once.

    The upload is let go while the broker is down, so the COPY_SEGMENT_FINISHED write meets a
    stopped broker and completes after its restart.
    """
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 12000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 3)
    root = tmp_path / "remote"
    cfg = kafka_config(
        kafka,
        unique_topic,
        tmp_path,
        storage=local_storage(root, GATED),
        task_interval_ms=200,
        retry_backoff_ms=200,
        retry_backoff_max_ms=2000,
        leadership_refresh_interval_ms=300,
        rescan_interval_ms=300,
        metadata_request_timeout_ms=5000,
    )
    proc = start_daemon(cfg, tmp_path / "daemon.log")
    try:
        wait_for("a copy at the gate", lambda: bool(gated_rsm.started(root, 1)), timeout=90)
        kafka.stop_node(1)
        gated_rsm.open_gate(root)  # the upload completes while the broker is down
        kafka.start_node(1)
        last = rolled_end(pdir_path)
        wait_for("caught up", lambda: caught_up(tmp_path / "work", unique_topic, last), timeout=120)
    finally:
        if kafka.node(1).proc is None:
            kafka.start_node(1)
        code = stop_daemon(proc)
    log = (tmp_path / "daemon.log").read_text()
    assert code == ExitCode.OK, log[-3000:]
    assert_tiered_exactly_once(cfg, tip_of(pdir_path, unique_topic), pdir_path, tmp_path / "reader")


@pytest.mark.faults
def test_second_sidecar_on_the_same_node_refuses_to_start(tmp_path: Path) -> None:
    """A second sidecar on the same work dir or log dir exits 4 naming the lock and writes nothing.

    Read-only commands still work beside the first; the first keeps running and tiering; after
    it is killed with -9 a new one starts at once (no stale lock); the log dir is unchanged.
    """
    logs, work = tmp_path / "logs", tmp_path / "work"
    write_partition(logs, "locked", 0, 200)
    base = {
        "log_dirs": [str(logs)],
        "task_interval_ms": 200,
        "rescan_interval_ms": 300,
        "storage": local_storage(tmp_path / "remote"),
        "topic_defaults": {"remote.storage.enable": True, "retention.ms": -1},
    }
    cfg = write_config(tmp_path / "rlm.yaml", work_dir=str(work), **base)
    other_work = write_config(tmp_path / "other.yaml", work_dir=str(tmp_path / "work2"), **base)
    log_listing = sorted(str(p.relative_to(logs)) for p in logs.rglob("*"))
    first = start_daemon(cfg, tmp_path / "first.log")
    try:
        wait_for("first running", lambda: read_status_file(work).get("state") == "running", timeout=60)
        status_before = (work / "status.json").read_bytes()
        same_work = run_once(cfg)
        assert same_work.returncode == ExitCode.ALREADY_RUNNING, same_work.stderr[-2000:]
        assert f"{work / 'rlm.lock'}: locked by another `rlm run` (pid {first.pid})" in same_work.stderr
        same_logs = run_once(other_work)
        assert same_logs.returncode == ExitCode.ALREADY_RUNNING, same_logs.stderr[-2000:]
        assert f"{logs}: locked by another `rlm run`" in same_logs.stderr
        assert not (tmp_path / "work2" / "status.json").exists(), "the refused one wrote nothing"
        # read-only commands take no lock
        assert rlm("status", "--config", str(cfg)).returncode == 0
        wait_for(
            "first caught up",
            lambda: caught_up(work, "locked", rolled_end(logs / "locked-0")),
            timeout=60,
        )
        assert first.poll() is None, "the first one keeps running"
        assert json.loads((work / "status.json").read_bytes())["pid"] == json.loads(status_before)["pid"]
        first.kill()  # kill -9: the kernel drops the flock with the process
        first.wait(30)
        again = run_once(cfg)
        assert again.returncode == 0, again.stderr[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    # the locks wrote nothing into the log dir (flock on the directory fd itself)
    assert sorted(str(p.relative_to(logs)) for p in logs.rglob("*")) == log_listing
    verify(cfg, "locked")


def fill(fs_dir: Path) -> Path:
    """Write a file into ``fs_dir`` until its file system says ENOSPC; returns the file."""
    filler = fs_dir / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 16384)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (root only; skipped where mounting is not permitted)."""
    mnt = tmp_path / "work"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root / CAP_SYS_ADMIN): {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


class GrowingPartition:
    """A standalone partition the test keeps appending to (64 KiB segments, idempotent batches)."""

    def __init__(self, log_dir: Path, topic: str) -> None:
        self.log_dir, self.tp = log_dir, TopicPartition(topic, 0)
        self.topic_id = KafkaUuid.random()
        self.w = PartitionWriter(
            log_dir / f"{topic}-0", topic_id=self.topic_id, config=WriterConfig(segment_bytes=64 * 1024)
        )
        self.batches = 0

    @property
    def tip(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.tp.topic, 0)

    def grow(self, batches: int) -> None:
        for _ in range(batches):
            self.w.append(
                [(f"k{self.batches}-{i}".encode(), b"v" * 90) for i in range(20)],
                producer_id=11,
                producer_epoch=0,
            )
            self.batches += 1
        self.w.roll()
        write_log_dir_files(
            self.log_dir,
            [(self.tp, self.w.log_end_offset)],
            meta=MetaProperties(1, "standalone-cluster-0001", 1),
        )


@pytest.mark.faults
def test_full_work_dir_is_a_typed_error_then_converges(small_fs: Path, tmp_path: Path) -> None:
    """Work dir full (ENOSPC on a 1 MiB tmpfs): a typed error naming the file, state kept whole, converges.

    The daemon keeps running, its JSON state files stay whole, no partial file is left, and once
    space is freed every segment is tiered exactly once.
    """
    logs, work = tmp_path / "logs", small_fs
    part = GrowingPartition(logs, "full")
    part.grow(60)
    cfg = write_config(
        tmp_path / "rlm.yaml",
        log_dirs=[str(logs)],
        work_dir=str(work),
        storage=local_storage(tmp_path / "remote"),
        topic_defaults={"remote.storage.enable": True, "retention.ms": -1},
        task_interval_ms=200,
        rescan_interval_ms=300,
        retry_backoff_ms=200,
        retry_backoff_max_ms=1000,
    )
    log_file = tmp_path / "daemon.log"
    proc = start_daemon(cfg, log_file)
    try:
        wait_for(
            "first segments tiered", lambda: caught_up(work, "full", rolled_end(logs / "full-0")), timeout=60
        )
        state_files = {p: p.read_bytes() for p in work.rglob("*.json")}
        filler = fill(work)
        part.grow(60)

        def typed_error() -> bool:
            return any(
                e.get("kind") == "WorkDirError"
                and "ENOSPC" in e["error"]
                and f"{work}/staging/" in e["error"]
                for e in events(log_file.read_text(), "task_failed")
            )

        wait_for("a typed ENOSPC error naming the staged file", typed_error, timeout=60)
        assert proc.poll() is None, "the daemon keeps running"
        for path, before in state_files.items():  # whole: the old version, never a torn one
            assert json.loads(path.read_bytes()) is not None and path.read_bytes() in (
                before,
                path.read_bytes(),
            )
        filler.unlink()
        wait_for("caught up", lambda: caught_up(work, "full", rolled_end(logs / "full-0")), timeout=90)
    finally:
        code = stop_daemon(proc)
    assert code == ExitCode.OK, log_file.read_text()[-3000:]
    assert not list(work.rglob("*.tmp")), "no half-written temporary file left"
    segs = all_segments(cfg, part.tip, tmp_path / "reader")
    assert all(m.state is S.COPY_SEGMENT_FINISHED for m in segs)
    want = [s.base_offset for s in PartitionDir(logs / "full-0").inactive_segments()]
    assert [m.start_offset for m in segs] == want
    assert stored_segment_ids(tmp_path / "remote") == {m.remote_log_segment_id.id.text for m in segs}
    verify(cfg, "full")
