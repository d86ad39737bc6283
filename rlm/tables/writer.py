"""Keep a topic's Iceberg table in step with its remote tier, exactly once per remote segment.

One pass (:meth:`IcebergSync.run_once`):

1. read the table's ledger (:mod:`rlm.tables.ledger`): the segment ids its snapshots hold;
2. plan each partition through the read core (``RemoteFetcher.plan``: COPY_SEGMENT_FINISHED
   segments on the leader-epoch lineage, cut at the log start offset) and list the links not in
   the ledger. With read_committed, a link is taken only when it ends at or below the
   partition's read_committed bound (``committed_bound``): its transactions' outcomes are known,
   so its rows never change afterwards; later links wait for the next pass;
3. per group of at most ``segments_per_commit`` links: rows through ``RemoteFetcher.scan``
   (aborted records and control batches left out by the core), sorted by (partition, offset),
   written as data files, then one fast-append snapshot whose summary names the segments
   (the Spark engine writes the files of every group of the pass in one job first,
   :meth:`IcebergSync.prepare_pass`; the commits still follow one by one, in the same order).

A crash between the data files and the commit leaves files no snapshot references (orphans,
counted by :func:`orphan_files`) and no ledger entry: the rerun writes the segment again (files
are never reused across passes: each pass writes its own).

Each commit also sets the topic's ledger property (the cumulative state, see
:mod:`rlm.tables.ledger`) in the same transaction, and names in its summary the pass that
made it (``rlm.writer``, a uuid per pass) and itself (``rlm.commit``, ``<writer>/<n>``).

When the commit fails (another writer committed first: Iceberg's optimistic concurrency, the
catalog swaps the metadata pointer only from the version this writer started from; or the
catalog's answer was lost and its client, retrying, reports a conflict or an unknown state),
the writer reloads the table and reads the ledger again. If the ledger holds the group's
segments, it asks whose commit holds them: its own (the answer was lost, the commit landed)
counts as committed and its files stay, they are the table's now; another writer's means its
files are deleted and the pass replans. If the ledger does not hold them, the same files are
committed on the new version. So two writers never both add a segment, and a writer never
deletes a file its own snapshot references.
"""

from __future__ import annotations

import copy
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from fetcher import IsolationLevel, RemoteFetcher
from rlm.config import IcebergConfig
from rlm.errors import IcebergTableError
from rlm.tables.deadletter import Decoding
from rlm.tables.ledger import (
    COMMIT_KEY,
    Ledger,
    SegmentWork,
    commit_keeping_files,
    ledger_transaction,
    read_ledger,
    stage_ledger,
    summary_properties,
)
from rlm.tables.table import (
    ARROW_SCHEMA,
    ROW_ORDER,
    ensure_table,
    parquet_files,
    s3_checksums_when_required,
    table_identifier,
    to_rows,
)

log = structlog.get_logger(__name__)

#: test seam: when set to a path, the writer creates that file (holding its pid) after writing a
#: group's data files and before committing them, then waits there until ``<path>.go`` exists
#: (a test kills it with -9 meanwhile, or lets another writer commit first)
HOLD_BEFORE_COMMIT_ENV = "RLM_TEST_ICEBERG_HOLD_BEFORE_COMMIT"


@dataclass(slots=True)
class PassResult:
    """What one pass did: segments and rows added, conflicts met, links left for later."""

    added_segments: int = 0
    added_rows: int = 0
    conflicts: int = 0
    waiting: int = 0  # links past the read_committed bound (their transactions are undecided)
    commits: list[int] = field(default_factory=list)  # snapshot ids committed
    dead_letters: int = 0  # rows sent to the dead-letter table (``iceberg.decode``)
    lost_answers: int = 0  # commits that landed though the catalog's answer said otherwise
    writer: str = ""  # the pass's identity (``rlm.writer`` of its commits)


class IcebergSync:
    """The writer of one topic's rows into its table (its own, or one shared with other topics:
    the ledger is the topic's, see :mod:`rlm.tables.ledger`). Not thread-safe; one per
    process and topic."""

    def __init__(self, fetcher: RemoteFetcher, catalog: Catalog, config: IcebergConfig, topic: str, *,
                 isolation: str | IsolationLevel | None = None,
                 on_commit: Callable[[list[SegmentWork], int], None] | None = None) -> None:
        self.fetcher = fetcher
        self.catalog = catalog
        self.config = config
        self.topic = topic
        self.isolation = IsolationLevel.parse(isolation or config.isolation)
        self.identifier = table_identifier(config, topic)
        self.on_commit = on_commit
        s3_checksums_when_required()
        self.table: Table = ensure_table(catalog, config, topic)
        self.decoding = Decoding(catalog, config, topic) if config.decode is not None else None
        if self.decoding is not None:
            self.table = self.decoding.prepare(self.table)
        self.writer = ""  # the running pass's identity (a new uuid per pass)
        self._commits = 0  # commits of the running pass (numbers its commit tokens)
        self.ledger = Ledger()  # the topic's ledger as of self.table

    # ---- planning --------------------------------------------------------------------------
    def refresh(self) -> Ledger:
        self.table = self.catalog.load_table(self.identifier)
        self.ledger = read_ledger(self.table, self.topic)  # this topic's (the table may hold several)
        return self.ledger

    def pending(self, ledger: Ledger) -> tuple[str, list[SegmentWork], int]:
        """(topic id, links not in the table in (partition, offset) order, links waiting)."""
        tps = self.fetcher.topics().get(self.topic)
        if not tps:
            self.fetcher.partition(self.topic, 0)  # raises UnknownTopicOrPartitionError, with the reason
            return "", [], 0
        topic_id = tps[0].topic_id.text
        if ledger.topic_ids and topic_id not in ledger.topic_ids:
            raise IcebergTableError(
                f"table {self.identifier} holds topic id(s) {sorted(ledger.topic_ids)}, but {self.topic} is "
                f"now {topic_id} (deleted and re-created?): use another table name")
        out: list[SegmentWork] = []
        waiting = 0
        for tp in tps:
            plan = self.fetcher.plan(tp)
            bound = (self.fetcher.committed_bound(self.topic, tp.partition).stable_offset
                     if self.isolation is IsolationLevel.READ_COMMITTED else plan.log_end)
            for i, link in enumerate(plan.segments):
                work = SegmentWork(tp.partition, link.metadata.remote_log_segment_id.id.text,
                                   max(link.first, ledger.next_offset.get(tp.partition, 0)), link.last + 1)
                if work.end > bound:
                    waiting += len(plan.segments) - i
                    break
                if work.start >= work.end or ledger.holds(work):
                    continue
                out.append(work)
        return topic_id, out, waiting

    # ---- one pass --------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        """Append every pending link, a group per snapshot, until none is left (replanning after a
        conflict with another writer)."""
        self.writer, self._commits = uuid.uuid4().hex, 0
        result = PassResult(writer=self.writer)
        for _ in range(self.config.commit_retries + 1):
            ledger = self.refresh()
            topic_id, todo, result.waiting = self.pending(ledger)
            if not todo:
                return result
            conflict = False
            step = self.config.segments_per_commit
            groups = [todo[i:i + step] for i in range(0, len(todo), step)]
            try:
                self.prepare_pass(groups, topic_id, result)
                for group in groups:
                    rows = self._append(group, topic_id, result)
                    if rows is None:
                        conflict = True
                        break
                    result.added_segments += len(group)
                    result.added_rows += rows
            finally:
                self.end_pass()
            if not conflict:
                return result
        raise IcebergTableError(f"{self.identifier}: commits kept conflicting with another writer "
                                f"({self.config.commit_retries} retries)")

    def prepare_pass(self, groups: list[list[SegmentWork]], topic_id: str, result: PassResult) -> None:
        """Called once per pass with all its commit groups, in commit order, before the first
        commit: an engine that writes the data files of the whole pass at once (one Spark job, see
        :class:`rlm.tables.spark_engine.SparkIcebergSync`) writes them here, and
        :meth:`write_files` then hands out each group's. Nothing here (PyIceberg writes each group
        just before its commit, so it holds no more than one group's rows)."""

    def end_pass(self) -> None:
        """Called when the pass's commit loop ends (done, a conflict that replans, or an error):
        an engine deletes the files it prepared for groups it never committed. Nothing here."""

    def rows_of(self, work: SegmentWork) -> pa.Table:
        """The link's rows, through the read core (read_committed drops aborted records)."""
        batches = [to_rows(b, work.segment_id) for b in self.fetcher.scan(
            self.topic, work.partition, start_offset=work.start, end_offset=work.end,
            isolation=self.isolation)]
        return pa.concat_tables(batches) if batches else ARROW_SCHEMA.empty_table()

    def write_files(self, group: list[SegmentWork], topic_id: str,
                    result: PassResult) -> tuple[list[DataFile], int]:
        """The group's rows as data files of the table, not committed yet (and their row count):
        PyIceberg here, a Spark job in :class:`rlm.tables.spark_engine.SparkIcebergSync`.
        With value decoding, the group's dead letters are committed first (see
        :mod:`rlm.tables.deadletter`) and only the decoded rows are written here."""
        data = pa.concat_tables([self.rows_of(w) for w in group])
        data = data.sort_by(ROW_ORDER)
        if self.decoding is not None:
            before = self.decoding.dead_letters
            data = self.decoding.split(group, data, topic_id, self.table, self.writer)
            result.dead_letters += self.decoding.dead_letters - before
        files: list[DataFile] = (list(_dataframe_to_data_files(self.table.metadata, data, self.table.io))
                                 if data.num_rows else [])
        return files, int(data.num_rows)

    def _append(self, group: list[SegmentWork], topic_id: str, result: PassResult) -> int | None:
        """Commit ``group`` as one snapshot with the ledger that holds it: its rows, or ``None``
        when another writer added any of its segments first (this writer's files are then
        deleted)."""
        files, nrows = self.write_files(group, topic_id, result)
        _hold_before_commit()
        self._commits += 1
        token = f"{self.writer}/{self._commits}"
        props = summary_properties(group, topic_id, self.topic, self.writer, token)
        for attempt in range(self.config.commit_retries + 1):
            after = copy.deepcopy(self.ledger)
            after.add_commit(group, token)
            after.rows += nrows
            after.topic_ids.add(topic_id)
            tx = ledger_transaction(self.table)
            with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
                for f in files:
                    append.append_data_file(f)
            stage_ledger(tx, self.topic, after)
            try:
                self.table = commit_keeping_files(tx)
                self.ledger = after
            except (CommitFailedException, CommitStateUnknownException) as e:
                result.conflicts += 1
                ledger = self.refresh()
                taken = [w for w in group if ledger.holds(w)]
                mine = bool(taken) and self._landed(ledger, group, token)
                log.info("iceberg_commit_conflict", table=self.identifier, attempt=attempt, commit=token,
                         taken_by_other=0 if mine else len(taken), landed=mine, error=str(e))
                if mine:
                    result.lost_answers += 1
                elif taken:
                    self._delete(files)
                    return None
                else:
                    continue
            snap = self.table.current_snapshot()
            snap_id = snap.snapshot_id if snap is not None else -1
            result.commits.append(snap_id)
            log.info("iceberg_commit", table=self.identifier, snapshot=snap_id, segments=len(group),
                     rows=nrows, files=len(files), commit=token)
            if self.on_commit is not None:
                self.on_commit(group, nrows)
            return nrows
        self._delete(files)
        raise IcebergTableError(f"{self.identifier}: commit of {len(group)} segments kept conflicting "
                                f"({self.config.commit_retries} retries)")

    def _landed(self, ledger: Ledger, group: list[SegmentWork], token: str) -> bool:
        """True when the commit ``token`` of ``group`` is in the table (a commit that landed
        though its answer was lost): the ledger's tail says whose commit holds the group; a
        snapshot naming the token says so too (the tail keeps the last commits only)."""
        if ledger.owner(group) == token:
            return True
        return any(s.summary is not None and s.summary.additional_properties.get(COMMIT_KEY) == token
                   for s in self.table.metadata.snapshots)

    def _delete(self, files: list[DataFile]) -> None:
        for f in files:
            try:
                self.table.io.delete(f.file_path)
            except OSError as e:  # an orphan left behind is reported by orphan_files, never read
                log.warning("iceberg_orphan_not_deleted", path=f.file_path, error=str(e))

    def status(self) -> Ledger:
        return self.refresh()


def _hold_before_commit() -> None:
    path = os.environ.get(HOLD_BEFORE_COMMIT_ENV)
    if not path:
        return
    Path(path).write_text(str(os.getpid()))
    go = Path(path + ".go")
    deadline = time.monotonic() + 600
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def orphan_files(table: Table) -> list[str]:
    """Data files under the table's ``data/`` directory that no snapshot references: what a writer
    killed between its files and its commit leaves behind (never read; safe to delete). Listed
    through the table's own FileIO filesystem (local, S3 with the catalog's endpoint, ...)."""
    referenced: set[str] = set()
    for snap in table.metadata.snapshots:
        for manifest in snap.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                referenced.add(entry.data_file.file_path)
    data = table.location().rstrip("/") + "/data"
    try:
        found = parquet_files(table, data)
    except (OSError, ValueError) as e:
        log.warning("iceberg_orphans_not_listed", location=data, error=str(e))
        return []
    return [uri for uri in found if uri not in referenced]
