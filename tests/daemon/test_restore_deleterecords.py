"""``rlm restore`` honours the source's ``DeleteRecords``: the restored broker's log start is the
source's, and no record the source stopped serving comes back.

Cluster A (the session broker) tiers a topic with the daemon (local storage, file metadata store);
``DeleteRecords`` then moves A's log start into the middle of the first segment, and the daemon
publishes that bound beside the segments. Cluster B is a new KRaft node: the topic is created, B
is stopped, ``rlm restore`` writes every tiered segment into its partition directory, B starts.
B's ListOffsets EARLIEST must equal A's, and a consumer of B from the beginning must read exactly
what a consumer of A from the beginning read — nothing below the bound. (Before restore read the
published bound, B started at the first segment's base offset and served the deleted records.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient

from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.log.checkpoints import read_offset_checkpoint
from rlm.log.partition import PartitionDir
from rlm.types import TopicPartition as RlmTopicPartition
from tests.daemon.helpers import create_topic, produce, wait_for
from tests.daemon.test_restore_broker import cli, reads, watermarks
from tests.fixtures.restore_target import restore_command, stopped_target

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def sidecar_config(path: Path, kafka: Any, topic: str) -> Path:
    """Local storage and a file metadata store under ``path``'s directory (readable while any
    broker is stopped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "log_dirs": [str(kafka.log_dir)], "work_dir": str(path.parent), "bootstrap_servers": kafka.bootstrap,
        "http": {"enabled": False},
        "topics": [{"pattern": topic, "remote.storage.enable": True, "retention.ms": -1,
                    "retention.bytes": -1}]}))
    return path


def run_once(cfg: Path) -> None:
    d = Daemon(load_config(cfg), once=True).start()
    assert d.run_once() == 0
    assert d.stop()


def test_restored_broker_starts_at_the_sources_delete_records_bound(
        kafka: Any, unique_topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic, a = unique_topic, kafka
    create_topic(a.bootstrap, topic)  # 1 MiB segments
    produce(a.bootstrap, topic, 2600, size=1000)
    pdir_a = a.log_dir / f"{topic}-0"
    wait_for("two segments rolled on A", lambda: len(PartitionDir(pdir_a).segments) >= 3)
    first_end = PartitionDir(pdir_a).segments[1].base_offset
    bound = first_end // 2  # inside the first segment
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 0, bound)]).values():
        fut.result(timeout=30)
    cfg_a = sidecar_config(tmp_path / "a" / "rlm.yaml", a, topic)
    run_once(cfg_a)  # tiers the rolled segments and publishes the bound
    tiered_end = PartitionDir(pdir_a).segments[-1].base_offset
    assert watermarks(a.bootstrap, topic)[0] == bound
    served = reads(a.bootstrap, topic, OFFSET_BEGINNING, tiered_end)
    assert served["read_committed"][0][0] == bound

    with stopped_target("restore-dr", topic) as b:
        restore = restore_command(cfg_a, topic, b)
        (plan,) = cli(capsys, *restore)["partitions"]
        assert (plan["published_log_start"], plan["log_start"], plan["first_offset"]) == (bound, bound, 0)
        (part,) = cli(capsys, *restore, "--execute")["partitions"]
        assert part["skipped"] is None and part["next_offset"] == tiered_end
        checkpoint = read_offset_checkpoint(b.log_dir / "log-start-offset-checkpoint")
        assert checkpoint[RlmTopicPartition(topic, 0)] == bound
        (again,) = cli(capsys, *restore, "--execute")["partitions"]  # a rerun changes nothing
        assert again["written"] == ["leader-epoch-checkpoint"]
        b.start_node(1)

        assert watermarks(b.bootstrap, topic) == (bound, tiered_end)  # ListOffsets EARLIEST = A's
        # from the beginning: nothing below the bound
        assert reads(b.bootstrap, topic, OFFSET_BEGINNING, tiered_end) == served
