"""What one remote compaction reads: the input segments, their aborted transactions, newer keys.

The inputs come through the RemoteStorageManager (remote segments are staged as files in the
daemon's own work dir, named ``<start offset>.log`` as the engine expects). The keys written
after the range (:class:`rlm.compaction.NewerKeys`) come from the later remote segments and from
the broker's local log above the range, read only (never written), and only below the LSO: a
record of an open transaction may still abort. Records of aborted transactions are left out, as
:class:`~rlm.compaction.NewerKeys` requires (an aborted newer value supersedes nothing). A file
that vanishes (local retention, the broker's cleaner swapping segments) only leaves keys out,
which is safe: a key left out keeps its older remote value.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import structlog

from rlm.compaction import NewerKeys
from rlm.daemon.local_log import LocalLogView
from rlm.daemon.workdir import writing
from rlm.errors import LogFileGoneError, RemoteResourceNotFoundError
from rlm.log.arrow import read_arrow
from rlm.log.lso import aborted_transactions
from rlm.log.records import iter_batches
from rlm.log.txn_index import AbortedTxn, parse_txn_index
from rlm.types import IndexType, RemoteLogSegmentMetadata, TopicIdPartition
from rsm_plugins.api import RemoteStorageManager
from rsm_plugins.streams import copy_to

log = structlog.get_logger(__name__)

#: memory of the newer-keys set (its own bound; keys that do not fit are only left out)
NEWER_KEYS_MEMORY = 64 * 1024 * 1024


@dataclass
class StagedInputs:
    """The input segments as files, the aborted transactions over them, and the newer keys."""

    directory: Path
    logs: list[Path] = field(default_factory=list)
    aborted: set[AbortedTxn] = field(default_factory=set)
    producer_snapshot: Path = Path()

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _read(stream: BinaryIO) -> bytes:
    try:
        return bytes(stream.read())
    finally:
        stream.close()


def remote_aborted(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
    """The aborted transactions of a remote segment's ``.txnindex`` (none when it has none)."""
    if md.txn_index_empty:
        return []
    try:
        data = _read(rsm.fetch_index(md, IndexType.TRANSACTION))
    except RemoteResourceNotFoundError:
        return []
    return parse_txn_index(data, base_offset=md.start_offset)


def stage_inputs(rsm: RemoteStorageManager, segments: Sequence[RemoteLogSegmentMetadata],
                 later: Iterable[RemoteLogSegmentMetadata],
                 directory: Path) -> StagedInputs:
    """Fetch ``segments`` into ``directory`` (emptied first) with every aborted transaction over them
    (theirs and the ``later`` segments', as ``UnifiedLog.collectAbortedTransactions`` walks on)
    and the last segment's producer snapshot (the compacted segment's, as the cleaner keeps every
    active producer's last batch)."""
    shutil.rmtree(directory, ignore_errors=True)
    staged = StagedInputs(directory)
    with writing(directory):  # a full work dir is a WorkDirError, as for every staged file
        (directory / "in").mkdir(parents=True)
        for md in segments:
            path = directory / "in" / f"{md.start_offset:020d}.log"
            stream = rsm.fetch_log_segment(md, 0)
            try:
                with open(path, "wb") as f:
                    copy_to(stream, f)
            finally:
                stream.close()
            staged.logs.append(path)
            staged.aborted.update(remote_aborted(rsm, md))
        for md in later:
            staged.aborted.update(remote_aborted(rsm, md))
        last = segments[-1]  # a copied segment always has one: its absence is an error (typed, named)
        staged.producer_snapshot = directory / f"{last.end_offset + 1:020d}.snapshot"
        staged.producer_snapshot.write_bytes(_read(rsm.fetch_index(last, IndexType.PRODUCER_SNAPSHOT)))
    return staged


def local_aborted(view: LocalLogView, start: int, end: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, end)`` from the broker's ``.txnindex`` files, read
    only. The ABORT of a transaction whose data is remote may be in the local log (the copy stops at
    the LSO, not at a marker): without it the engine would take aborted data for live records.
    Vanished files give what could be read (the reader could not use them either)."""
    if not view.segments:
        return []
    try:
        return aborted_transactions(view.pdir, max(start, view.segments[0].base_offset), end)
    except (LogFileGoneError, FileNotFoundError):
        return []


def _aborted_batch_offsets(data: bytes | Path, aborted: Sequence[AbortedTxn]) -> list[tuple[int, int]]:
    """``[first, last]`` offsets of the transactional batches that belong to an aborted transaction."""
    by_pid: dict[int, list[AbortedTxn]] = {}
    for a in aborted:
        by_pid.setdefault(a.producer_id, []).append(a)
    out: list[tuple[int, int]] = []
    if not by_pid:
        return out
    for h in iter_batches(data, verify_crc=False):
        if h.is_transactional and not h.is_control and any(
            a.first_offset <= h.base_offset <= a.last_offset for a in by_pid.get(h.producer_id, ())
        ):
            out.append((h.base_offset, h.last_offset))
    return out


def _keys(table: pa.Table, skip: list[tuple[int, int]]) -> pa.ChunkedArray:
    if not skip:
        return table.column("key")
    offsets = table.column("offset").to_numpy()
    mask = np.ones(len(offsets), np.bool_)
    for first, last in skip:
        mask &= (offsets < first) | (offsets > last)
    return pc.filter(table.column("key"), pa.array(mask))


class NewerKeysBuilder:
    """Collects the keys of records above the compacted range that a reader will read."""

    def __init__(self, tp: TopicIdPartition, above: int, stable_end: int,
                 memory_bytes: int = NEWER_KEYS_MEMORY) -> None:
        self.tp = tp
        self.above = above  # keys of offsets > above count
        self.stable_end = stable_end  # ... and < the LSO
        self.keys = NewerKeys(memory_bytes)

    def add_segment(self, data: bytes | Path, aborted: Sequence[AbortedTxn]) -> None:
        table = read_arrow(data, topic=self.tp.topic, partition=self.tp.partition, verify_crc=False,
                           start_offset=self.above + 1, end_offset=self.stable_end)
        if table.num_rows:
            self.keys.add(_keys(table, _aborted_batch_offsets(data, aborted)))

    def add_remote(self, rsm: RemoteStorageManager, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
        for md in segments:
            if md.end_offset <= self.above or md.start_offset >= self.stable_end:
                continue
            data = _read(rsm.fetch_log_segment(md, 0))
            self.add_segment(data, remote_aborted(rsm, md))

    def add_local(self, view: LocalLogView) -> None:
        """The broker's local log above the range, read only; vanished files are skipped."""
        segs = [s for s in view.segments if (s.next_offset is None or s.next_offset > self.above + 1)
                and s.base_offset < self.stable_end]
        if not segs:
            return
        aborted = local_aborted(view, self.above + 1, self.stable_end)
        for s in segs:
            try:
                self.add_segment(s.log_path, aborted)
            except (LogFileGoneError, FileNotFoundError):
                log.info("newer_keys_segment_gone", topic=self.tp.topic, partition=self.tp.partition,
                         base_offset=s.base_offset)
