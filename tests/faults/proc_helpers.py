"""Helpers for the process/disk/clock faults: the daemon as a real subprocess, its config, its
JSON log, the remote store's contents, and ``rlm verify`` as the final word."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from rlm.config import load_config
from rlm.plugin_setup import load_rlmm
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition

ROOT = Path(__file__).resolve().parents[2]
GATED = "tests.faults.gated_rsm:GatedLocalRSM"


def write_config(path: Path, **cfg: Any) -> Path:
    path.write_text(yaml.safe_dump({"log_format": "json", "http": {"enabled": False}, **cfg}))
    return path


def local_storage(root: Path, plugin: str = "local") -> dict[str, Any]:
    return {"plugin": plugin, "config": {"root": str(root), "fsync": False}}


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(extra)
    return env


def rlm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args],
        cwd=ROOT,
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_once(cfg_file: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return rlm("run", "--config", str(cfg_file), "--once", env=child_env(**env))


def start_daemon(cfg_file: Path, log_file: Path, **env: str) -> subprocess.Popen[bytes]:
    """``rlm run`` (not ``--once``) in the background; its JSON log goes to ``log_file``."""
    with open(log_file, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rlm.cli", "run", "--config", str(cfg_file)],
            cwd=ROOT,
            env=child_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_daemon(proc: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """First SIGTERM (drain), wait for the exit status; SIGKILL only if it never exits."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
    return int(proc.returncode)


def events(text: str, name: str | None = None) -> Iterator[dict[str, Any]]:
    """Parsed JSON log lines (optionally only event ``name``); other lines are skipped."""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if name is None or ev.get("event") == name:
            yield ev


def stored_segment_ids(root: Path) -> set[str]:
    """Segment ids of every object under the local plugin's root (``<start:020d>-<id>.<ext>``)."""
    return {f.name[21:].split(".")[0] for f in root.rglob("*") if f.is_file() and not f.name.startswith(".")}


def all_segments(cfg_file: Path, tip: TopicIdPartition, reader_dir: Path) -> list[RemoteLogSegmentMetadata]:
    """Every segment the metadata store knows for ``tip``, in any state, read by a fresh reader."""
    cfg = load_config(cfg_file)
    if cfg.metadata.manager == "file":  # the store lives in the daemon's work dir: open it read-only
        reader = load_rlmm(cfg, 99, read_only=True)
    else:
        reader = load_rlmm(cfg.model_copy(update={"work_dir": reader_dir}), 99)
    try:
        reader.on_partition_leadership_changes(set(), {tip})
        return sorted(reader.list_remote_log_segments(tip), key=lambda m: (m.start_offset, m.end_offset))
    finally:
        reader.close()


def verify(cfg_file: Path, topic: str) -> dict[str, Any]:
    """``rlm verify --deep --json`` as a subprocess; asserts it passes and returns the report."""
    res = rlm("verify", "--config", str(cfg_file), "--topic", topic, "--deep", "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report: dict[str, Any] = json.loads(res.stdout)
    assert report["ok"] and report["problems"] == 0, report
    return report


def read_status_file(work: Path) -> dict[str, Any]:
    """The daemon's status file, or {} while it does not exist (yet)."""
    try:
        data: dict[str, Any] = json.loads((work / "status.json").read_text())
        return data
    except FileNotFoundError:
        return {}


def caught_up(work: Path, topic: str, last_end: int) -> bool:
    """The status file says every offset up to ``last_end`` is in remote storage, with no error."""
    part = read_status_file(work).get("partitions", {}).get(f"{topic}-0")
    return bool(part) and part["remote_end"] >= last_end and part["copy_lag"] == 0 and not part["last_error"]


def rolled_end(pdir_path: Path) -> int:
    """The last offset of the partition's newest rolled (inactive) segment."""
    from rlm.log.partition import PartitionDir

    pd = PartitionDir(pdir_path)
    return pd.next_offset(pd.inactive_segments()[-1]) - 1
