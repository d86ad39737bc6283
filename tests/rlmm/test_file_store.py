"""Crash safety, corruption handling, snapshots and locking of the embedded file store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rlm.errors import ConfigError, MetadataDecodeError, MetadataUnavailableError
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.file import SNAPSHOT_FILE, FileRemoteLogMetadataManager
from rlmm.file_log import FRAME, LOG_FILE, MAGIC
from rlmm.testing import seg, upd

S = RemoteLogSegmentState
TP = TopicIdPartition(KafkaUuid(bytes(range(16))), "t", 0)
ROOT = Path(__file__).resolve().parents[2]

# A writer process that adds and finishes segments and then dies without closing (no snapshot).
CRASHING_WRITER = textwrap.dedent("""
    import os, sys
    from rlm.types import KafkaUuid, RemoteLogSegmentId, RemoteLogSegmentMetadata
    from rlm.types import RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState, TopicIdPartition
    from rlmm.file import FileRemoteLogMetadataManager
    tp = TopicIdPartition(KafkaUuid(bytes(range(16))), "t", 0)
    m = FileRemoteLogMetadataManager.open(sys.argv[1], **{"snapshot.interval.records": 10**6})
    for i in range(int(sys.argv[2])):
        sid = RemoteLogSegmentId(tp, KafkaUuid(bytes([i + 1]) * 16))
        m.add_remote_log_segment_metadata(
            RemoteLogSegmentMetadata(sid, i * 10, i * 10 + 9, 0, 0, 0, 100, ((0, i * 10),)))
        m.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(sid, 0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0))
    if len(sys.argv) > 3:
        print("ready", flush=True)
        sys.stdin.read()
    os._exit(0)
""")


def _run_writer(directory: Path, n: int) -> None:
    subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(directory), str(n)], check=True, cwd=ROOT,
                   timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _frame_starts(log: Path) -> list[int]:
    data = log.read_bytes()
    pos, starts = len(MAGIC), []
    while pos < len(data):
        starts.append(pos)
        pos += FRAME.size + FRAME.unpack_from(data, pos)[0]
    return starts


def _state(directory: Path) -> list[tuple[int, S]]:
    with FileRemoteLogMetadataManager.open(directory) as m:
        return [(x.start_offset, x.state) for x in m.list_remote_log_segments(TP)]


@pytest.fixture(scope="module")
def crashed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("crashed") / "store"
    _run_writer(d, 5)  # 10 records: 5 adds + 5 FINISHED updates, no snapshot
    assert not (d / SNAPSHOT_FILE).exists()
    return d


def test_crash_without_close_loses_nothing(crashed_store: Path, tmp_path: Path) -> None:
    d = tmp_path / "s"
    shutil.copytree(crashed_store, d)
    assert _state(d) == [(i * 10, S.COPY_SEGMENT_FINISHED) for i in range(5)]


def test_torn_last_write_is_dropped_at_every_cut_point(crashed_store: Path, tmp_path: Path) -> None:
    log_bytes = (crashed_store / LOG_FILE).read_bytes()
    last = _frame_starts(crashed_store / LOG_FILE)[-1]
    expected = [(i * 10, S.COPY_SEGMENT_FINISHED) for i in range(4)] + [(40, S.COPY_SEGMENT_STARTED)]
    for cut in range(last + 1, len(log_bytes)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / LOG_FILE).write_bytes(log_bytes[:cut])
        with capture_logs() as logs:
            assert _state(d) == expected
        torn = [e for e in logs if e["event"] == "rlmm_log_torn_tail_dropped"]
        assert torn and torn[0]["position"] == last and torn[0]["dropped_bytes"] == cut - last
        assert (d / LOG_FILE).stat().st_size == last  # truncated away on open
        with FileRemoteLogMetadataManager.open(d) as m:  # and appending after it works
            m.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                RemoteLogSegmentId(TP, KafkaUuid(bytes([1]) * 16)), 0, S.DELETE_SEGMENT_STARTED, 0))
        assert _state(d)[0] == (0, S.DELETE_SEGMENT_STARTED)
        shutil.rmtree(d)


@pytest.mark.parametrize("tail", [b"\x00" * 4096, b"\x00\x00\x00\x05\xde\xad", os.urandom(3000), b"\x01"])
def test_garbage_or_zero_filled_tail_is_dropped(crashed_store: Path, tmp_path: Path, tail: bytes) -> None:
    d = tmp_path / "s"
    shutil.copytree(crashed_store, d)
    size = (d / LOG_FILE).stat().st_size
    with open(d / LOG_FILE, "ab") as f:
        f.write(tail)
    assert _state(d) == [(i * 10, S.COPY_SEGMENT_FINISHED) for i in range(5)]
    assert (d / LOG_FILE).stat().st_size == size


def test_corruption_before_valid_records_is_an_error_not_a_truncation(crashed_store: Path,
                                                                      tmp_path: Path) -> None:
    d = tmp_path / "s"
    shutil.copytree(crashed_store, d)
    starts = _frame_starts(d / LOG_FILE)
    data = bytearray((d / LOG_FILE).read_bytes())
    data[starts[2] + FRAME.size + 5] ^= 0xFF  # a payload byte of the third record
    (d / LOG_FILE).write_bytes(bytes(data))
    with pytest.raises(MetadataDecodeError) as info:
        FileRemoteLogMetadataManager.open(d)
    assert info.value.offset == starts[2] and LOG_FILE in str(info.value)
    assert (d / LOG_FILE).read_bytes() == bytes(data)  # nothing was truncated
    FileRemoteLogMetadataManager.open(d / "other").close()  # the failed open released its lock
    with pytest.raises(MetadataDecodeError):
        FileRemoteLogMetadataManager.open(d)


def test_not_an_rlmm_log(tmp_path: Path) -> None:
    (tmp_path / LOG_FILE).write_bytes(b"something else entirely")
    with pytest.raises(MetadataDecodeError, match="not an rlmm metadata log"):
        FileRemoteLogMetadataManager.open(tmp_path)


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "ahead"])
def test_unusable_snapshot_falls_back_to_full_replay(tmp_path: Path, damage: str) -> None:
    with FileRemoteLogMetadataManager.open(tmp_path) as m:
        a, b = seg(TP, 0, 9, {0: 0}), seg(TP, 10, 19, {0: 10, 1: 15})
        for md in (a, b):
            m.add_remote_log_segment_metadata(md)
            m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, custom=b"c"))
        m.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))
    snap = bytearray((tmp_path / SNAPSHOT_FILE).read_bytes())
    if damage == "flip":
        snap[len(snap) // 2] ^= 0x55
    elif damage == "truncate":
        snap = snap[: len(snap) - 7]
    elif damage == "header":
        snap[0:4] = b"XXXX"
    else:  # claims to cover more of the log than exists
        snap[6:14] = (10**9).to_bytes(8, "little")
    (tmp_path / SNAPSHOT_FILE).write_bytes(bytes(snap))
    with capture_logs() as logs, FileRemoteLogMetadataManager.open(tmp_path) as m:
        assert [(x.start_offset, x.state) for x in m.list_remote_log_segments(TP)] == [
            (0, S.DELETE_SEGMENT_STARTED), (10, S.COPY_SEGMENT_FINISHED)]
        assert m.remote_log_segment_metadata(TP, 1, 16) == next(iter(m.list_remote_log_segments(TP, 1)))
        assert m.highest_offset_for_epoch(TP, 0) == 14
    assert any(e["event"] == "rlmm_snapshot_unusable" for e in logs)
    opened = [e for e in logs if e["event"] == "rlmm_file_store_opened"]
    assert opened[0]["replayed"] == 5 and opened[0]["snapshot_position"] == len(MAGIC)


def test_restart_uses_snapshot_and_replays_only_the_rest(tmp_path: Path) -> None:
    with FileRemoteLogMetadataManager.open(tmp_path, **{"snapshot.interval.records": 4}) as m:
        for i in range(5):
            md = seg(TP, i * 10, i * 10 + 9, {0: i * 10})
            m.add_remote_log_segment_metadata(md)
            m.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
        m._since_snapshot = 0  # simulate a crash after the last periodic snapshot: skip the close snapshot
    with capture_logs() as logs, FileRemoteLogMetadataManager.open(tmp_path) as m2:
        assert [x.start_offset for x in m2.list_remote_log_segments(TP)] == [0, 10, 20, 30, 40]
    opened = next(e for e in logs if e["event"] == "rlmm_file_store_opened")
    assert opened["snapshot_position"] > len(MAGIC) and opened["replayed"] == 2


def test_second_opener_in_process_is_refused(tmp_path: Path) -> None:
    with FileRemoteLogMetadataManager.open(tmp_path):
        with pytest.raises(MetadataUnavailableError, match="locked by another process") as info:
            FileRemoteLogMetadataManager.open(tmp_path)
        assert info.value.retriable
    FileRemoteLogMetadataManager.open(tmp_path).close()


def test_lock_held_by_another_process(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, str(tmp_path), "1", "hold"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # structlog also writes to stdout
            if line.strip() == b"ready":
                break
        with pytest.raises(MetadataUnavailableError, match=f"pid {proc.pid}"):
            FileRemoteLogMetadataManager.open(tmp_path)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert _state(tmp_path) == [(0, S.COPY_SEGMENT_FINISHED)]  # the dead holder's lock is gone


@pytest.mark.parametrize(("config", "message"), [
    ({}, "set 'dir'"),
    ({"dir": "x", "bogus.key": 1}, "bogus.key"),
    ({"dir": "x", "snapshot.interval.records": 0}, "snapshot.interval.records"),
])
def test_config_errors(config: dict[str, object], message: str) -> None:
    m = FileRemoteLogMetadataManager()
    with pytest.raises(ConfigError, match=message):
        m.configure(config)


def test_log_dir_fallback_and_kafka_keys(tmp_path: Path) -> None:
    m = FileRemoteLogMetadataManager()
    m.configure({"log.dir": str(tmp_path), "broker.id": 3, "cluster.id": "abc"})
    m.close()
    assert (tmp_path / "remote_log_metadata" / LOG_FILE).read_bytes() == MAGIC
