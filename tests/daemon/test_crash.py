"""kill -9 at each step of the copy protocol, restart, and check that the result converges.

The daemon runs as a real subprocess (``rlm run --once``); ``RLM_TEST_CRASH_AT`` makes it SIGKILL
itself at the named step. After a clean restart every eligible segment is COPY_SEGMENT_FINISHED
exactly once, nothing else is listed, and remote storage holds no object of any other segment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.cli import main as cli_main
from rlm.config import load_config
from rlm.daemon.crash import STEPS
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm
from rlm.types import RemoteLogSegmentState, TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, topic_rlmm, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def run_daemon(cfg_file: Path, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    if crash_at:
        env["RLM_TEST_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg_file), "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def remote_segment_ids(root: Path) -> set[str]:
    """Segment ids of every object under the local plugin's root (``<start:020d>-<id>.<ext>``)."""
    return {f.name[21:].split(".")[0] for f in root.rglob("*") if f.is_file() and not f.name.startswith(".")}


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_then_restart_converges(
    kafka: Any, unique_topic: str, tmp_path: Path, step: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = kafka.bootstrap
    create_topic(bs, unique_topic)
    produce(bs, unique_topic, 16000)
    pdir_path = kafka.log_dir / f"{unique_topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 4)
    work = tmp_path / "work"
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(kafka.log_dir)],
                "work_dir": str(work),
                "bootstrap_servers": bs,
                "storage": {"plugin": "local", "config": {"root": str(tmp_path / "remote"), "fsync": False}},
                "metadata": topic_rlmm(bs, work),
                "log_format": "json",
                "topics": [{"pattern": unique_topic, "remote.storage.enable": True}],
                "http": {"enabled": False},
                "thread_pool_size": 1,
            }
        )
    )
    crashed = run_daemon(cfg_file, step)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    restarted = run_daemon(cfg_file, None)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    if step != "after_copy_finished":
        assert "stale_copy_cleanup" in restarted.stderr

    pdir = PartitionDir(pdir_path)
    tip = TopicIdPartition(pdir.topic_id, unique_topic, 0)
    cfg = load_config(cfg_file)
    reader = load_rlmm(cfg.model_copy(update={"work_dir": tmp_path / "reader"}), 99)
    try:
        reader.on_partition_leadership_changes(set(), {tip})
        done = finished(reader, tip)
        listed = list(reader.list_remote_log_segments(tip))
    finally:
        reader.close()
    want = [s.base_offset for s in pdir.inactive_segments()]
    assert [m.start_offset for m in done] == want, "every eligible segment FINISHED exactly once"
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in listed)
    assert remote_segment_ids(tmp_path / "remote") == {m.remote_log_segment_id.id.text for m in done}
    # and the fsck agrees: every file whole, no orphan, no gap, no STARTED left
    capsys.readouterr()
    assert cli_main(["verify", "--config", str(cfg_file), "--topic", unique_topic, "--deep", "--json"]) == 0
    [part] = json.loads(capsys.readouterr().out)["partitions"]
    objects = [f for f in (tmp_path / "remote").rglob("*") if f.is_file()]
    assert part["segments"] == len(listed) and part["objects"] == len(objects)
