"""Remote compaction on the operator's real path: a broker, S3 (SeaweedFS) and the
``__remote_log_metadata`` topic, every step a cold ``rlm`` command from a shell.

The other compacted-topic tests run on the local plugin; this one proves the same replacement on
S3: the compacted history reads as before (every key's latest value, both isolation levels,
through ``rlm fetch``), ``rlm verify --deep`` is clean, and the bucket holds the objects of the
FINISHED segments only (every input's objects deleted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.types import RemoteLogSegmentState
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import check_reads, finished_of, setup_topic
from tests.daemon.helpers import s3_storage, set_topic_config
from tests.faults.proc_helpers import all_segments, child_env, rlm, verify
from tests.services.s3 import SeaweedFS

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _run_once(cfg: Path) -> None:
    res = rlm("run", "--config", str(cfg), "--once", env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def _stored_ids(weed: SeaweedFS, bucket: str) -> set[str]:
    """Segment ids of every object in the bucket (``.../<start:020d>-<id>.<ext>``)."""
    client = weed.boto3_client()
    ids: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            name = obj["Key"].rsplit("/", 1)[-1]
            if len(name) > 21 and name[20] == "-":
                ids.add(name[21:].split(".")[0])
    return ids


def test_remote_compaction_on_s3_with_the_metadata_topic_from_the_shell(
    kafka: Any, unique_topic: str, tmp_path: Path, seaweedfs: SeaweedFS, seaweedfs_bucket: str
) -> None:
    topic = unique_topic
    cfg, written, tip = setup_topic(kafka, topic, tmp_path)
    raw = yaml.safe_load(cfg.read_text())
    raw["storage"] = s3_storage(seaweedfs, seaweedfs_bucket)
    assert raw["metadata"]["manager"] == "topic"
    cfg.write_text(yaml.safe_dump(raw))

    _run_once(cfg)  # tiered; the broker's cleaner held back: nothing compacted
    before = finished_of(all_segments(cfg, tip, tmp_path / "r0"))
    assert len(before) >= 2, before
    remote_end = before[-1].end_offset + 1
    read_before = check_reads(cfg, kafka, topic, written, remote_end)

    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    _run_once(cfg)  # compacts the tiered history remotely
    segs = all_segments(cfg, tip, tmp_path / "r1")
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in segs), [m.state for m in segs]
    assert segs[0].remote_log_segment_id not in {m.remote_log_segment_id for m in before}, "not compacted"
    assert len(segs) < len(before) or segs[0].segment_size_in_bytes < before[0].segment_size_in_bytes
    assert _stored_ids(seaweedfs, seaweedfs_bucket) == {m.remote_log_segment_id.id.text for m in segs}, \
        "the bucket holds the FINISHED segments' objects only"

    after = check_reads(cfg, kafka, topic, written, remote_end)
    assert len(after) < len(read_before), "records were removed from the remote history"
    verify(cfg, topic)
