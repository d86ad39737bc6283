"""A gap ending the remote history, read through the merged endpoint, beside the real broker.

A ``compact,delete`` topic is tiered (compaction held back), then the keys of the last tiered
segment's last records get newer values (in the broker's active segment), then the daemon's
remote compaction replaces the tiered segments: the keys' remote records are superseded, so the
new last remote segment ends below its recorded end offset. The broker's local retention then
deletes every rolled segment: its log starts at the remote end. A consumer at an offset in that
gap is routed to the remote tier (below the broker's log start), which holds nothing at or after
it; the merged endpoint then answers from the broker at its log start, so the consumer reads on
(both isolation levels), as a consumer of the broker would have. ``rlm fetch`` (remote only)
ends at the remote end there: exit 0, no record.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTp

from fetcher import RemoteFetcher
from fetcher.kafka import EndpointThread, ListenerSettings
from rlm.config import load_config
from rlm.daemon.remote_compaction import RemoteCompactor
from rlm.log.partition import PartitionDir
from tests.compacted.helpers import KEYS, PAD, Written, high_watermark, key, read_from, set_topic_config
from tests.compacted.test_compact_topic import CLEANING, NO_CLEANING, _raw_config, _remote, _tier_once
from tests.daemon.helpers import create_topic, wait_for
from tests.faults.proc_helpers import rlm

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
COMMON = {"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}
TAIL = 20  # records at the end of the last tiered segment whose keys get newer values


def _write(bootstrap: str, topic: str, keys: range, tag: str, w: Written) -> None:
    """One record per batch, no producer id: remote compaction drops a superseded record's whole
    batch (the batch of an idempotent producer's last write would be kept, empty, as the cleaner
    keeps it, and a consumer would step over its offsets)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "linger.ms": 0,
                  "batch.num.messages": 1})

    def acked(err: Any, msg: Any) -> None:
        assert err is None, err
        w.records[msg.offset()] = (msg.key(), msg.value())

    for k in keys:
        p.produce(topic, key=key(k), value=f"{tag}-{k}-".encode() + PAD, partition=0, on_delivery=acked)
        p.poll(0)
    assert p.flush(60) == 0


def _broker_log_start(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"})
    try:
        return int(c.get_watermark_offsets(CkTp(topic, 0), timeout=10)[0])
    finally:
        c.close()


def test_merged_endpoint_reads_on_from_a_gap_ending_the_remote_history(
    kafka: Any, unique_topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs, topic = kafka.bootstrap, unique_topic
    create_topic(bs, topic, 1, 1, **{"cleanup.policy": "compact,delete", **COMMON, **NO_CLEANING})
    written = Written()
    for r in range(5):  # ~2.4 MB of distinct keys: two rolled 1 MB segments and the active one
        _write(bs, topic, range(r * KEYS, (r + 1) * KEYS), f"r{r}", written)
    cfg = tmp_path / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(_raw_config(kafka, topic, tmp_path)))
    with monkeypatch.context() as m:  # tier only: remote compaction comes once the keys are newer
        m.setattr(RemoteCompactor, "run", lambda *args, **kwargs: 0)
        _tier_once(cfg)
    before = _remote(cfg, topic, kafka)
    assert len(before) >= 2, before
    remote_end = before[-1].end_offset + 1
    tail = range(remote_end - TAIL, remote_end)
    newer = Written()
    for o in tail:
        k = written.records[o][0]
        assert k is not None
        n = int(k.decode().removeprefix("key-"))
        _write(bs, topic, range(n, n + 1), "newer", newer)
    assert min(newer.records) >= remote_end, "the newer values are above the remote end"

    set_topic_config(bs, topic, **CLEANING)
    _tier_once(cfg)  # remote compaction: the tail keys' remote records are superseded
    after = _remote(cfg, topic, kafka)
    assert after[-1].end_offset + 1 == remote_end, "the remote end stays where it was"
    assert len(after) < len(before), "the tiered segments were replaced"

    set_topic_config(bs, topic, **{"retention.bytes": "1"})
    pdir = kafka.log_dir / f"{topic}-0"
    wait_for("local segments deleted", lambda: PartitionDir(pdir).segments[0].base_offset >= remote_end)
    wait_for("broker log start at the remote end", lambda: _broker_log_start(bs, topic) >= remote_end)
    assert _broker_log_start(bs, topic) == remote_end
    hw = high_watermark(bs, topic)
    broker_side = {**written.records, **newer.records}  # everything above the remote end: the broker's
    expected = sorted((o, k, v) for o, (k, v) in broker_side.items() if o >= remote_end)
    gap = tail[TAIL // 2]

    fetcher = RemoteFetcher.from_config(load_config(cfg))
    try:
        assert fetcher.plan(topic, 0).log_end == remote_end
        for iso in ("read_uncommitted", "read_committed"):
            # no record (the round's last batch may stay as an empty header, as Kafka's cleaner keeps it)
            got = fetcher.fetch(topic, 0, gap, isolation=iso)
            assert not list(got.data_records()), "nothing remote at or after the gap"
        with EndpointThread(fetcher, ListenerSettings(port=0, merged=True), tmp_path / "merged") as ep:
            got = {iso: read_from(ep.bootstrap, topic, gap, iso, hw)
                   for iso in ("read_uncommitted", "read_committed")}
    finally:
        fetcher.close()
    for iso, rows in got.items():
        assert rows == expected, f"{iso}: the consumer reads on to the broker's records"

    # rlm fetch reads the remote tier only: it ends at the remote end (exit 0, no record)
    res = rlm("fetch", "--config", str(cfg), "--topic", topic, "--offset", str(gap), "--format", "json",
              timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [json.loads(line) for line in res.stdout.splitlines() if line.strip()] == []
