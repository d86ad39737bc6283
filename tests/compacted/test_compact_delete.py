"""A ``cleanup.policy=compact,delete`` topic beside the real broker, against a reference topic.

Both topics get the same keyed workload (updates, tombstones, a committed and an aborted
transaction, deleted keys written again). The reference keeps everything locally (``compact``,
the broker's own cleaner). The tiered topic is tiered by the daemon, then the broker's cleaner
rewrites its segments (nothing changes remotely), then its local retention deletes every rolled
segment. Read from offset 0 through the merged endpoint (both isolation levels) and through
``rlm fetch`` + the broker, it gives every record at its own offset with its own content, never
aborted data under read_committed, and for every key the value the reference topic ends with.
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTp

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.log.partition import PartitionDir
from tests.compacted.helpers import (
    Row,
    final_of,
    high_watermark,
    read_from,
    set_topic_config,
    tree_digest,
    wait_cleaned_past,
    write_workload,
)
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING, _raw_config, _remote, _tier_once
from tests.daemon.helpers import create_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.usefixtures("no_remote_compaction")]
ROOT = Path(__file__).resolve().parents[2]
COMMON = {"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}


def _rlm_fetch(cfg: Path, topic: str, start: int, end: int) -> list[Row]:
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "fetch", "--config", str(cfg), "--topic", topic, "--offset",
         str(start), "--until-offset", str(end), "--isolation", "read_committed", "--format", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr

    def unb64(s: str | None) -> bytes | None:
        return None if s is None else base64.b64decode(s)

    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return [(r["offset"], unb64(r["key"]), unb64(r["value"])) for r in rows]


def _offset_for_time(bootstrap: str, topic: str, ts: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"})
    try:
        return int(c.offsets_for_times([CkTp(topic, 0, ts)], timeout=30)[0].offset)
    finally:
        c.close()


def test_compact_delete_topic_keeps_the_compacted_history(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    bs = kafka.bootstrap
    topic, reference = unique_topic, f"{unique_topic}-ref"
    create_topic(bs, topic, **{"cleanup.policy": "compact,delete", **COMMON, **NO_CLEANING})
    create_topic(bs, reference, **{"cleanup.policy": "compact", **COMMON, **CLEANING})
    written = write_workload(bs, topic)
    written_ref = write_workload(bs, reference)
    pdir_path = kafka.log_dir / f"{topic}-0"

    cfg_path = tmp_path / "rlm.yaml"
    cfg_path.write_text(yaml.safe_dump(_raw_config(kafka, topic, tmp_path)))
    _tier_once(cfg_path)  # below the LSO, as a delete topic: no cleaner pass needed
    segs = _remote(cfg_path, topic, kafka)
    assert segs and segs[-1].end_offset + 1 == PartitionDir(pdir_path).segments[-1].base_offset

    before = tree_digest(tmp_path / "remote")
    set_topic_config(bs, topic, **CLEANING)
    wait_cleaned_past(kafka.log_dir, topic, 0)
    assert tree_digest(tmp_path / "remote") == before, "the cleaner's rewrite changes nothing remotely"
    _tier_once(cfg_path)
    after = tree_digest(tmp_path / "remote")
    assert {k: after[k] for k in before} == before
    segs = _remote(cfg_path, topic, kafka)
    for prev, nxt in itertools.pairwise(segs):
        assert nxt.start_offset == prev.end_offset + 1
    remote_end = segs[-1].end_offset + 1
    # ListOffsets by time, asked of the broker while it still holds the (cleaned) range
    kept = read_from(bs, topic, 0, "read_committed", high_watermark(bs, topic))
    probe = next(o for o, _, _ in kept if o >= remote_end // 2)
    stamp = _first_from(bs, topic, probe)[1]
    broker_answer = _offset_for_time(bs, topic, stamp)

    # the broker's local retention deletes every rolled segment (size retention keeps the active one)
    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    wait_for("local segments deleted", lambda: PartitionDir(pdir_path).segments[0].base_offset >= remote_end)
    hw = high_watermark(bs, topic)

    ref = read_from(bs, reference, 0, "read_committed", high_watermark(bs, reference))
    assert final_of(ref) == written_ref.final(), "the reference topic: the broker's own answer"
    fetcher = RemoteFetcher.from_config(load_config(cfg_path))
    try:
        with EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp_path / "merged") as ep:
            merged = {iso: read_from(ep.bootstrap, topic, 0, iso, hw)
                      for iso in ("read_committed", "read_uncommitted")}
            by_time = _offset_for_time(ep.bootstrap, topic, stamp)
            first_at = _first_from(ep.bootstrap, topic, by_time)
    finally:
        fetcher.close()
    for iso, rows in merged.items():
        assert rows and rows[0][0] == 0, iso
        assert all(written.records[o] == (k, v) for o, k, v in rows), f"{iso}: offsets and contents kept"
        assert {o for o, _, _ in rows} >= {o for o in written.records if o not in written.aborted}, iso
    assert not {o for o, _, _ in merged["read_committed"]} & written.aborted
    assert final_of(merged["read_committed"]) == written.final() == final_of(ref)
    # the remote history holds what the cleaner removed: the answer may be earlier, never later
    assert by_time <= broker_answer and first_at[1] >= stamp

    # rlm fetch (the remote part) + the broker (its local part): the same history
    remote = _rlm_fetch(cfg_path, topic, 0, remote_end)
    local = read_from(bs, topic, remote_end, "read_committed", hw)
    assert remote + local == merged["read_committed"]

    res = subprocess.run([sys.executable, "-m", "rlm.cli", "verify", "--config", str(cfg_path), "--deep",
                          "--topic", topic], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def _first_from(bootstrap: str, topic: str, offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record a consumer assigned at ``offset`` receives."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"})
    try:
        c.assign([CkTp(topic, 0, offset)])
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and not m.error():
                return int(m.offset()), int(m.timestamp()[1])
        raise AssertionError(f"no record from {offset}")
    finally:
        c.close()
