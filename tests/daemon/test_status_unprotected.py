"""``rlm status`` exits 5 while a partition the configuration asks to tier is not protected, and
says why per partition; beside a real broker (the session's Kafka 4.1.1).

Before, it exited 0 whenever the daemon was alive: a partition whose every copy failed, or one the
daemon's discovery refused (a ``partition.metadata`` it cannot read; beside Kafka 2.8 a topic id
nobody knows), looked like success to a script or a probe, while the broker's local retention
would delete data that was nowhere else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.errors import RemoteStorageError
from rlm.exit_codes import ExitCode
from rlm.log.partition import PartitionDir
from rlm.types import LogSegmentData, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager
from tests.daemon.helpers import create_topic, produce, wait_for
from tests.services.kafka import KafkaCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
REFUSED = "-refused"


class RefusingLocalRSM(LocalRemoteStorageManager):
    """The ``local`` plugin refusing every copy of a topic whose name ends with ``-refused`` (the
    start-up probe and other topics go through): a store that takes one partition's data and not
    another's, as a bucket policy or a quota can."""

    plugin_name = "refusing-local"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        if metadata.topic_id_partition.topic.endswith(REFUSED):
            raise RemoteStorageError(f"copy of {metadata.topic_id_partition.topic} refused by the test store")
        return super().copy_log_segment_data(metadata, segment_data)


def rlm(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    if args[0] == "status":  # the daemon's own log carries the failed task's traceback
        assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return res


def rolled_topic(kafka: KafkaCluster, topic: str) -> None:
    create_topic(kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, 8000)
    wait_for(f"{topic}: a rolled segment",
             lambda: len(PartitionDir(kafka.log_dir / f"{topic}-0").inactive_segments()) >= 1)


def write_config(tmp_path: Path, log_dir: Path, bootstrap: str, topics: list[str], plugin: str) -> Path:
    doc: dict[str, Any] = {
        "log_dirs": [str(log_dir)],
        "work_dir": str(tmp_path / "work"),
        "bootstrap_servers": bootstrap,
        "storage": {"plugin": plugin, "config": {"root": str(tmp_path / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(tmp_path / "meta")}},
        "topics": [{"pattern": t, "remote.storage.enable": True} for t in topics],
        "http": {"enabled": False},
    }
    path = tmp_path / "rlm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_failing_copy_is_unprotected_until_a_run_succeeds(
    kafka: KafkaCluster, unique_topic: str, tmp_path: Path
) -> None:
    good, bad = f"{unique_topic[:80]}-ok", f"{unique_topic[:80]}{REFUSED}"
    for topic in (good, bad):
        rolled_topic(kafka, topic)
    cfg = write_config(tmp_path, kafka.log_dir, kafka.bootstrap, [good, bad],
                       f"{__name__}:RefusingLocalRSM")

    ran = rlm("run", "--once", "--config", str(cfg))
    assert ran.returncode == ExitCode.FAILURE, ran.stderr[-3000:]  # a --once task failed

    res = rlm("status", "--json", "--config", str(cfg))
    assert res.returncode == ExitCode.UNPROTECTED, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert list(doc["unprotected"]) == [f"{bad}-0"], doc["unprotected"]
    why = doc["unprotected"][f"{bad}-0"]
    assert why.startswith("NOT PROTECTED: its last run failed") and "refused by the test store" in why, why
    parts = doc["partitions"]
    assert not parts[f"{bad}-0"]["protected"] and parts[f"{bad}-0"]["unprotected_reason"] == why
    assert parts[f"{good}-0"]["protected"] and parts[f"{good}-0"]["unprotected_reason"] is None
    assert parts[f"{good}-0"]["remote_segments"] >= 1 and parts[f"{bad}-0"]["remote_segments"] == 0

    table = rlm("status", "--config", str(cfg))
    assert table.returncode == ExitCode.UNPROTECTED
    lines = table.stdout.splitlines()
    assert f"ERROR {bad}-0: {why}" in lines, table.stdout
    assert "1 partition(s) not protected (exit status 5)" in lines, table.stdout
    assert not any(ln.startswith(f"ERROR {good}-0") for ln in lines), table.stdout

    # the store takes the data now: the next run copies it and clears the error
    write_config(tmp_path, kafka.log_dir, kafka.bootstrap, [good, bad], "local")
    again = rlm("run", "--once", "--config", str(cfg))
    assert again.returncode == ExitCode.OK, again.stderr[-3000:]
    healed = rlm("status", "--json", "--config", str(cfg))
    assert healed.returncode == ExitCode.OK, healed.stdout + healed.stderr
    doc = json.loads(healed.stdout)
    assert doc["unprotected"] == {} and doc["partitions"][f"{bad}-0"]["protected"]
    assert doc["partitions"][f"{bad}-0"]["remote_segments"] >= 1


def test_partition_the_daemon_cannot_read_is_unprotected(
    kafka: KafkaCluster, unique_topic: str, tmp_path: Path
) -> None:
    """A copy of the broker's partition folder whose ``partition.metadata`` is of a version this
    sidecar does not know: discovery refuses it (never guesses the topic id from the broker)."""
    rolled_topic(kafka, unique_topic)
    logs = tmp_path / "logs"
    src = kafka.log_dir / f"{unique_topic}-0"
    shutil.copytree(src, logs / src.name, ignore=shutil.ignore_patterns("*.deleted", "*.cleaned", "*.swap"))
    shutil.copy(kafka.log_dir / "meta.properties", logs / "meta.properties")
    (logs / src.name / "partition.metadata").write_text("version: 1\ntopic_id: VHatZigQQGqs7ccJ5sZVng")
    cfg = write_config(tmp_path, logs, kafka.bootstrap, [unique_topic], "local")

    ran = rlm("run", "--once", "--config", str(cfg))
    assert ran.returncode == ExitCode.OK, ran.stderr[-3000:]  # nothing failed: nothing was tried
    res = rlm("status", "--json", "--config", str(cfg))
    assert res.returncode == ExitCode.UNPROTECTED, res.stdout + res.stderr
    why = json.loads(res.stdout)["unprotected"][f"{unique_topic}-0"]
    assert why.startswith("NOT PROTECTED: partition.metadata not understood") and "version 1" in why, why
    table = rlm("status", "--config", str(cfg))
    assert table.returncode == ExitCode.UNPROTECTED and f"ERROR {unique_topic}-0: {why}" in table.stdout
