"""The remote cleaner checkpoint lives in the metadata (rsm_plugins.compaction_mark), not in a work dir.

Beside the real broker: a ``compact,delete`` topic tiered and compacted remotely by one daemon;
then everything is looked at from a **fresh work dir** — another node's daemon after a leadership
move, or the same node with its work dir wiped:

* the compacted segment's custom metadata carries the mark (its clean end) around the plugin's
  checksums, which reads still check;
* ``rlm verify --deep`` is clean: the broker's local log still holds records the remote compaction
  removed, and verify knows the range was compacted from the mark alone (before marks, a new
  leader's verify reported ``local_segment_mismatch``);
* the job finds nothing due when only a little new data was tiered (``min.cleanable.dirty.ratio``
  0.99): the compacted history counts as clean (before marks it counted dirty again and the whole
  history was compacted once more);
* ``rlm metadata rebuild`` from the bucket keeps the mark (the segment descriptor carries it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.log.partition import PartitionDir
from rlm.types import RemoteLogSegmentMetadata, TopicIdPartition
from rsm_plugins import compaction_mark, integrity
from tests.compacted.helpers import KEYS, Written, high_watermark, set_topic_config, update_keys
from tests.compacted.test_compact_topic import CLEANING
from tests.compacted.test_replacement import finished_of, rebuilt_segments, setup_topic, tier_once
from tests.daemon.helpers import topic_rlmm
from tests.faults.proc_helpers import all_segments, verify

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def fresh_work_dir(cfg: Path, kafka: Any, work: Path) -> Path:
    """The same configuration with a new, empty work dir (the metadata store's cache included)."""
    raw = yaml.safe_load(cfg.read_text())
    raw["work_dir"] = str(work)
    raw["metadata"] = topic_rlmm(kafka.bootstrap, work)
    path = cfg.with_name(f"{work.name}.yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


def mark_of(md: RemoteLogSegmentMetadata) -> int | None:
    found = compaction_mark.decode(md.custom_metadata)
    return None if found is None else found.clean_end


def compact_once(kafka: Any, topic: str, tmp: Path
                 ) -> tuple[Path, TopicIdPartition, RemoteLogSegmentMetadata]:
    """The topic tiered (broker's cleaner held back), then compacted remotely; the new segment."""
    cfg, _, tip = setup_topic(kafka, topic, tmp)
    tier_once(cfg)
    set_topic_config(kafka.bootstrap, topic, **CLEANING)
    assert tier_once(cfg)["compactions"] == 1
    new = finished_of(all_segments(cfg, tip, tmp / "r0"))[0]
    return cfg, tip, new


def test_a_new_leader_reads_the_remote_cleaner_checkpoint_from_the_metadata(
    kafka: Any, unique_topic: str, tmp_path: Path
) -> None:
    topic = unique_topic
    cfg, tip, new = compact_once(kafka, topic, tmp_path)
    assert mark_of(new) == new.end_offset + 1, "the output is marked compacted through its end"
    manifest = integrity.decode(new.custom_metadata)
    assert manifest is not None and manifest.files, "the plugin's checksums are still there, inside the mark"

    fresh = fresh_work_dir(cfg, kafka, tmp_path / "new-leader")
    pdir = PartitionDir(kafka.log_dir / f"{topic}-0")
    assert pdir.segments[0].base_offset == 0, "the broker still holds the compacted range locally"
    report = verify(fresh, topic)  # --deep, against the broker's local log; asserts no problem
    assert [p["replaced"] for p in report["partitions"]] == [[]]
    assert not (tmp_path / "new-leader" / "remote-compaction").exists()

    # a little new data, tiered by the new leader: dirty ratio below 0.99 only if the compacted
    # history counts as clean
    set_topic_config(kafka.bootstrap, topic, **{**CLEANING, "min.cleanable.dirty.ratio": "0.99"})
    hw = high_watermark(kafka.bootstrap, topic)
    for r in range(12):  # until the broker rolls a segment (1 MB) holding only new data
        update_keys(kafka.bootstrap, topic, range(150, KEYS), f"late{r}", Written())
        if PartitionDir(pdir.path).segments[-1].base_offset > hw:
            break
    else:
        raise AssertionError("no new segment rolled")
    counted = tier_once(fresh)
    after = finished_of(all_segments(fresh, tip, tmp_path / "r1"))
    assert after[0].remote_log_segment_id == new.remote_log_segment_id, "the compacted segment stays"
    assert len(after) >= 2 and after[-1].end_offset > new.end_offset, "the new data was tiered"
    assert counted["compactions"] == 0, "nothing due: the history below the mark is clean"
    verify(fresh, topic)

    rebuilt = {m.remote_log_segment_id: m for m in finished_of(rebuilt_segments(cfg, tip, tmp_path))}
    assert mark_of(rebuilt[new.remote_log_segment_id]) == new.end_offset + 1, "rebuild keeps the mark"
    assert all(mark_of(m) is None for m in after[1:]), "copies of broker segments carry no mark"
