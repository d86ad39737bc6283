"""The world of the replacement property test (tests/compacted/test_property_replacement.py).

A partition directory filled by the project's own writer as a broker fills it; the broker's log
cleaner played by the compaction engine (proven equal to the real cleaner by
tests/compaction/test_broker_cleaner.py) and the broker's local retention; the sidecar's copy,
expiry and remote compaction jobs built as :class:`rlm.daemon.service.Daemon` builds them (local
storage plugin, file metadata store), with a restart after a simulated ``kill -9``; and a reader
from offset 0 through the read core the way ``rlm fetch`` reads, then the local log above the
remote end, as a consumer falls through to the broker. No broker process: an example runs in
milliseconds, so hypothesis can try hundreds of sequences.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fetcher import RemoteFetcher
from rlm.commands.fetch import fetches
from rlm.compaction import CompactionInput, CompactionSettings, compact
from rlm.config import DaemonConfig, load_config
from rlm.daemon.clock import wall_ms
from rlm.daemon.compacted import cleaner_checkpoint
from rlm.daemon.context import EpochHistory, TaskContext
from rlm.daemon.copier import SegmentCopier
from rlm.daemon.discovery import TieringPolicy
from rlm.daemon.expiry import RemoteExpirer
from rlm.daemon.leadership import ClusterView
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.metrics import DaemonMetrics
from rlm.daemon.quota import CopyQuota
from rlm.daemon.remote_compaction import RemoteCompactor
from rlm.daemon.service import standalone_lso
from rlm.daemon.status import StatusBoard
from rlm.errors import UnknownTopicOrPartitionError
from rlm.lineage import finished_only
from rlm.log.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    MetaProperties,
)
from rlm.log.lso import aborted_transactions, last_stable_offset
from rlm.log.model import BatchHeader, Record
from rlm.log.partition import PartitionDir
from rlm.log.records import iter_records
from rlm.log.txn_index import AbortedTxn, encode_txn_index
from rlm.log.writer import (
    PartitionWriter,
    WriterConfig,
    atomic_write,
    merge_offset_checkpoint,
    write_log_dir_files,
)
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import KafkaUuid, RemoteLogSegmentMetadata, TopicIdPartition, TopicPartition
from tests.compacted.helpers import Row

NODE = 1
TOPIC = "changelog"
SEGMENT_SUFFIXES = ("log", "index", "timeindex", "txnindex")
#: every segment is rolled by the state machine's own rule, never by size or age
NEVER_ROLL = WriterConfig(segment_bytes=2**31 - 1, segment_ms=2**62)


class LiveWriter(PartitionWriter):
    """The writer with the broker's visibility: each append is in the ``.log`` at once, and the
    active segment's ``.txnindex`` holds each ABORT as soon as it is written (the broker appends
    both through its file channels; :class:`PartitionWriter` writes files to be read after it
    closes, so it buffers the log and writes the transaction index when a segment rolls). Readers
    of the local log (the newer keys of remote compaction, read_committed above the remote end)
    must see what a broker's log dir would show them."""

    def _append(self, data: bytes, now: int, marker: Any) -> BatchHeader:
        header = super()._append(data, now, marker)
        seg = self._seg
        seg.file.flush()
        if seg.aborted:
            atomic_write(self.dir / f"{seg.base_offset:020d}.txnindex", encode_txn_index(seg.aborted))
        return header


class Broker:
    """One partition's log dir as an unmodified broker keeps it: appends (high watermark = log
    end), rolls, its cleaner and its local retention."""

    def __init__(self, log_dir: Path, scratch: Path, topic_configs: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.scratch = scratch
        self.topic_configs = topic_configs
        self.tp = TopicPartition(TOPIC, 0)
        self.topic_id = KafkaUuid.random()
        self.pdir = log_dir / f"{TOPIC}-0"
        self.writer = LiveWriter(self.pdir, topic_id=self.topic_id, config=NEVER_ROLL, clock=wall_ms)
        write_log_dir_files(log_dir, [(self.tp, 0)], meta=MetaProperties(1, "property-cluster-0001", NODE))

    @property
    def tip(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, TOPIC, 0)

    @property
    def log_end(self) -> int:
        return self.writer.log_end_offset

    def append(self, records: Sequence[tuple[bytes, bytes | None]], *, producer_id: int,
               transactional: bool = False) -> BatchHeader:
        """One batch; returns its header (offsets ``base_offset..last_offset``)."""
        h = self.writer.append(list(records), producer_id=producer_id, producer_epoch=0,
                               transactional=transactional)
        self._high_watermark()
        return h

    def end_transaction(self, producer_id: int, *, commit: bool) -> None:
        self.writer.end_transaction(producer_id, 0, commit=commit)
        self._high_watermark()

    def roll(self) -> None:
        self.writer.roll()

    @property
    def last_stable_offset(self) -> int:
        return last_stable_offset(PartitionDir(self.pdir))

    def _high_watermark(self) -> None:
        """Every append is replicated at once: the HW (and the recovery point) is the log end."""
        ends = {self.tp: self.log_end}
        merge_offset_checkpoint(self.log_dir / REPLICATION_OFFSET_CHECKPOINT, ends)
        merge_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT, ends)

    def cleanable_segments(self) -> list[Any]:
        """The rolled segments wholly below the LSO (an open transaction stops the cleaner, as
        Kafka's first unstable offset does)."""
        pd = PartitionDir(self.pdir)
        lso = last_stable_offset(pd)
        segs = pd.segments
        return [s for s, nxt in itertools.pairwise(segs) if nxt.base_offset <= lso]

    def clean(self) -> bool:
        """The broker's cleaner over the cleanable segments, merged into one group (same base offset
        as the first; the cleaner merges small segments so): the engine with the topic's configs at
        the broker's clock and the aborted transactions Kafka's cleaner collects (up to the end of
        the range), the output swapped in, ``cleaner-offset-checkpoint`` moved to the end."""
        closed = self.cleanable_segments()
        if not closed:
            return False
        first = closed[0].base_offset
        end = PartitionDir(self.pdir).segments[len(closed)].base_offset
        dirty = max(cleaner_checkpoint(self.pdir, self.tp) or 0, first)
        aborted = aborted_transactions(PartitionDir(self.pdir), first, end)
        out = self.scratch / "cleaned"
        shutil.rmtree(out, ignore_errors=True)
        result = compact(CompactionInput([s.log_path for s in closed], aborted, dirty_offset=dirty), out,
                         CompactionSettings.from_kafka(self.topic_configs), now_ms=wall_ms())
        files = result.files
        assert files is not None and result.segments_used == len(closed) and result.end_offset == end, result
        for s in closed:
            for suffix in SEGMENT_SUFFIXES:
                s.file(suffix).unlink(missing_ok=True)
        for f in (files.log, files.offset_index, files.time_index, files.txn_index):
            if f is not None:
                os.replace(f, self.pdir / f.name)
        merge_offset_checkpoint(self.log_dir / CLEANER_OFFSET_CHECKPOINT, {self.tp: end})
        return True

    def delete_tiered(self, remote_end: int) -> int:
        """Local retention of a ``compact,delete`` topic: the oldest rolled segments go, here only
        those wholly below ``remote_end`` (a broker deleting untiered data loses it whatever the
        sidecar does, which is not what this test is about). Returns how many were deleted."""
        segs = PartitionDir(self.pdir).segments
        n = 0
        for seg, nxt in itertools.pairwise(segs):
            if nxt.base_offset > remote_end:
                break
            for suffix in SEGMENT_SUFFIXES:
                seg.file(suffix).unlink(missing_ok=True)
            n += 1
        if n:
            start = {self.tp: segs[n].base_offset}
            merge_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT, start)
        return n


def daemon_config(root: Path, cleanup_policy: str) -> DaemonConfig:
    """``rlm.yaml`` of a standalone sidecar on ``root/logs``: local storage, the file metadata store,
    the topic tiered with ``cleanup_policy`` and no remote retention."""
    return load_config(None, **{
        "log_dirs": [str(root / "logs")],
        "work_dir": str(root / "work"),
        "storage": {"plugin": "local", "config": {"root": str(root / "remote")}},
        "metadata": {"manager": "file", "config": {"dir": str(root / "work" / "metadata")}},
        "topics": [{"pattern": TOPIC, "remote.storage.enable": True, "cleanup.policy": cleanup_policy,
                    "retention.ms": -1}],
        "http": {"enabled": False},
    })


class Crash(BaseException):
    """``kill -9`` at a named protocol step: a BaseException, so no ``except Exception`` of the
    daemon sees it (only ``finally`` blocks run, which a real kill would skip: they remove staged
    files and in-memory bookkeeping, nothing a restart reads)."""


class CrashPoints:
    """``RLM_TEST_CRASH_AT`` in-process: :func:`rlm.daemon.crash.crash_point` is replaced, in the
    modules that call it on the copy, delete and replacement paths, by one raising :class:`Crash`
    at the armed step (once)."""

    MODULES = ("rlm.daemon.remote_ops", "rlm.daemon.remote_compaction")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed: str | None = None
        for module in self.MODULES:
            monkeypatch.setattr(f"{module}.crash_point", self.point)

    def point(self, step: str) -> None:
        if step == self.armed:
            self.armed = None
            raise Crash(step)


class Sidecar:
    """The daemon's per-partition jobs on one :class:`TaskContext`, as ``Daemon.start`` wires
    them, each callable on its own (a daemon pass runs copy, remote compaction, expiry in order).
    The topic's broker configs (cleanup policy, ``delete.retention.ms``, ...) come in a
    :class:`ClusterView`, as the daemon's DescribeConfigs gives them."""

    def __init__(self, config: DaemonConfig, broker: Broker) -> None:
        self.broker = broker
        view = ClusterView(topic_configs={TOPIC: dict(broker.topic_configs)})
        self.topic_config = TieringPolicy(config).topic_config(TOPIC, view)
        rsm = load_rsm(config, NODE)
        rlmm = load_rlmm(config, NODE)
        quota, status = CopyQuota(config.copy_max_bytes_per_second), StatusBoard(config.work_dir, NODE)
        self.ctx = TaskContext(config, NODE, rsm, rlmm, DaemonMetrics(), quota, status)
        rlmm.on_partition_leadership_changes({broker.tip}, set())
        history = EpochHistory(config.work_dir)
        self.copier = SegmentCopier(self.ctx, history)
        self.compactor = RemoteCompactor(self.ctx, history)
        self.expirer = RemoteExpirer(self.ctx, history)

    def _local(self) -> tuple[LocalLogView, int]:
        view = LocalLogView.load(self.broker.pdir)
        return view, standalone_lso(view)

    def tier(self) -> int:
        """The copy job, then expiry (which undoes copies a crash left STARTED)."""
        view, lso = self._local()
        n = self.copier.run(self.broker.tip, view, lso, self.topic_config)
        self.expirer.run(self.broker.tip, view, lso, self.topic_config)
        return n

    def compact(self) -> int:
        """The remote compaction job (it first finishes half-done replacements), then expiry."""
        view, lso = self._local()
        n = self.compactor.run(self.broker.tip, view, lso, self.topic_config)
        self.expirer.run(self.broker.tip, view, lso, self.topic_config)
        return n

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        return list(self.ctx.rlmm.list_remote_log_segments(self.broker.tip))

    def remote_end(self) -> int:
        """One past the highest FINISHED offset (0 when nothing is tiered)."""
        return max((m.end_offset + 1 for m in finished_only(self.segments())), default=0)

    def close(self) -> None:
        self.ctx.rlmm.close()
        self.ctx.rsm.close()


def data_tiered_ahead_of_its_abort(broker: Broker, sidecar: Sidecar, producer_id: int) -> None:
    """The sequence the property test found: a transaction's data (offset 0) rolls into a segment
    that is tiered while its ABORT (1) is still local; the same producer then commits (2, 3) and the
    segment rolls. The broker's cleaner passes that drop the marker's entry are the caller's."""
    broker.append([(b"k0", b"aborted")], producer_id=producer_id, transactional=True)  # 0
    broker.roll()
    broker.end_transaction(producer_id, commit=False)  # 1
    assert sidecar.tier() == 1 and sidecar.remote_end() == 1, "the data at 0 tiered, not its ABORT at 1"
    broker.append([(b"k1", b"committed")], producer_id=producer_id, transactional=True)  # 2
    broker.end_transaction(producer_id, commit=True)  # 3
    broker.roll()


def _is_aborted(h: BatchHeader, aborted: Sequence[AbortedTxn]) -> bool:
    return h.is_transactional and any(
        a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted)


def read_from_zero(config: DaemonConfig, broker: Broker, isolation: str) -> tuple[list[Row], int]:
    """Every data record from offset 0 as a consumer of the sidecar and the broker gets it: the
    remote history through the read core as ``rlm fetch`` reads it (:func:`rlm.commands.fetch.fetches`),
    then the broker's log from the remote end (read_committed up to its LSO, without the aborted
    transactions of its ``.txnindex`` files, as the broker's fetch answer lists them). Returns the
    rows and the remote end."""
    rows: list[Row] = []
    args = argparse.Namespace(topic=TOPIC, partition=0, isolation=isolation, leader_epoch=None)
    with RemoteFetcher.from_config(config, load_all=False) as f:
        try:
            end = f.plan(TOPIC, 0).log_end
        except UnknownTopicOrPartitionError:
            end = 0
        for r in fetches(f, args, 0, end):
            rows += [(rec.offset, rec.key, rec.value) for _, rec in r.data_records(0) if rec.offset < end]
    pdir = PartitionDir(broker.pdir)
    committed = isolation == "read_committed"
    upto = last_stable_offset(pdir) if committed else broker.log_end  # the broker's fetch answer
    aborted = aborted_transactions(pdir, end, upto) if committed else []
    for seg in pdir.segments:
        for h, rec in iter_records(seg.log_path):
            if isinstance(rec, Record) and end <= rec.offset < upto and not _is_aborted(h, aborted):
                rows.append((rec.offset, rec.key, rec.value))
    return rows, end


@dataclass
class Worlds:
    """Numbered directories under one temporary root, one per example (removed after it)."""

    root: Path
    n: int = 0

    def new(self) -> Path:
        self.n += 1
        d = self.root / f"w{self.n}"
        d.mkdir(parents=True)
        return d
