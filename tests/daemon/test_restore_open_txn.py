"""``rlm restore`` of a partition whose last tiered segment holds a transaction whose marker was
never tiered: the new broker ends it as the old one would have after a timeout abort.

Cluster A (the session broker): a transaction writes records, other records roll the segment, then
the transaction is aborted — its ABORT marker lands in the active segment, which is never tiered.
The daemon tiers the rolled segment (its producer snapshot holds the transaction as open). A is
what a consumer would have seen had the coordinator aborted the transaction by timeout. Cluster B
(a new KRaft node, no coordinator state for the transaction) gets the restored segments: its last
stable offset must reach its log end, and consumers at both isolation levels must read exactly
what A's read (the transaction's records skipped by ``read_committed``). Before restore aborted
open transactions, B's last stable offset stayed at the transaction's first offset forever and
``read_committed`` consumers stopped there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from rlm.log.partition import PartitionDir
from tests.daemon.helpers import create_topic, produce, transactional_producer, wait_for
from tests.daemon.test_restore_broker import cli, reads, watermarks
from tests.daemon.test_restore_deleterecords import run_once, sidecar_config
from tests.fixtures.restore_target import restore_command, stopped_target

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def last_stable_offset(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()},  # type: ignore[no-untyped-call]
                              isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
    return int(next(iter(futs.values())).result(timeout=30).offset)


def test_transaction_open_at_the_restored_end_is_aborted_as_after_a_timeout(
        kafka: Any, unique_topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic, a = unique_topic, kafka
    create_topic(a.bootstrap, topic)  # 1 MiB segments
    produce(a.bootstrap, topic, 300, size=1000)
    txn = transactional_producer(a.bootstrap, f"{topic}-open")
    txn.begin_transaction()
    for i in range(200):
        txn.produce(topic, key=f"t{i}".encode(), value=os.urandom(1000), partition=0)
    assert txn.flush(30) == 0  # the transaction's records are in the first segment
    produce(a.bootstrap, topic, 1200, size=1000)  # rolls it while the transaction is open
    pdir_a = a.log_dir / f"{topic}-0"
    wait_for("a segment rolled on A", lambda: len(PartitionDir(pdir_a).segments) >= 2)
    txn.abort_transaction(30)  # the marker goes to the active segment, never tiered
    cfg_a = sidecar_config(tmp_path / "a" / "rlm.yaml", a, topic)
    run_once(cfg_a)
    tiered_end = PartitionDir(pdir_a).segments[-1].base_offset
    served = reads(a.bootstrap, topic, OFFSET_BEGINNING, tiered_end)
    assert len(served["read_uncommitted"]) - len(served["read_committed"]) == 200

    with stopped_target("restore-txn", topic) as b:
        restore = [*restore_command(cfg_a, topic, b), "--execute"]
        (part,) = cli(capsys, *restore)["partitions"]
        assert part["skipped"] is None and part["next_offset"] == tiered_end
        (aborted,) = part["aborted_transactions"]
        assert aborted["marker_offset"] == tiered_end and aborted["first_offset"] < tiered_end
        (again,) = cli(capsys, *restore)["partitions"]  # a rerun writes no second marker
        assert again["written"] == ["leader-epoch-checkpoint"]
        b.start_node(1)

        assert watermarks(b.bootstrap, topic) == (0, tiered_end + 1)
        assert last_stable_offset(b.bootstrap, topic) == tiered_end + 1  # not stuck at the transaction
        assert reads(b.bootstrap, topic, OFFSET_BEGINNING, tiered_end) == served
