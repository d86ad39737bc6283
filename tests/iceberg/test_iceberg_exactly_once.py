"""Exactly once through table maintenance: snapshot expiry (all but the newest, by age, between
passes), compaction, a catalog whose commit answer is lost, racing writers, a table written by
the old ledger form, and random sequences of all of them.

The table side is real (PyIceberg on the SQL catalog, real files, real commits and real
expiries); the tiered history is made up per offset and planned by the read core's planner, as
in ``test_iceberg_lineage.py`` (the broker-backed end to end is ``test_iceberg.py``): partition
``p``'s offset ``o`` has value ``p:o``, each segment ends with a control record (an offset with
no row), so "the table equals the tiered history" is checked row for row, every time: no
duplicate (partition, offset), no missing one.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import Table

import rlm.tables.writer as writer_mod
from fetcher.planning import plan_partition
from rlm.config import IcebergConfig
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

FIN = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
SIZE = 10  # offsets per segment; the last one of each is a control record (no row)
ROWS = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("ms")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


class History:
    """A made-up tiered topic: the read core's surface the writer and the expiry use."""

    def __init__(self, topic: str = "t", partitions: int = 2) -> None:
        self.topic = topic
        tid = KafkaUuid.random()
        self.tps = [TopicIdPartition(tid, topic, p) for p in range(partitions)]
        self.segments: dict[int, list[RemoteLogSegmentMetadata]] = {p: [] for p in range(partitions)}
        self.start: dict[int, int] = dict.fromkeys(range(partitions), 0)  # log start offsets

    def tier(self, partition: int, n: int = 1) -> None:
        for _ in range(n):
            first = len(self.segments[partition]) * SIZE
            tp = self.tps[partition]
            self.segments[partition].append(RemoteLogSegmentMetadata(
                RemoteLogSegmentId.generate_new(tp), first, first + SIZE - 1, 0, 1, 0, 100,
                ((0, first),), FIN))

    def end(self, partition: int) -> int:
        return len(self.segments[partition]) * SIZE

    def truth(self) -> list[tuple[int, int]]:
        """Every (partition, offset) a reader can read: from the log start, no control records."""
        return [(p, o) for p in self.segments for o in range(self.start[p], self.end(p)) if (o + 1) % SIZE]

    # ---- the read core's surface ----------------------------------------------------------
    def topics(self) -> dict[str, list[TopicIdPartition]]:
        return {self.topic: list(self.tps)}

    def plan(self, tp: Any, partition: int | None = None) -> Any:
        p = tp.partition if partition is None else partition
        plan = plan_partition(self.tps[p], self.segments[p])
        links = tuple(dataclasses.replace(s, first=max(s.first, self.start[p]))
                      for s in plan.segments if s.last >= self.start[p])
        return dataclasses.replace(plan, segments=links)

    def log_start(self, tp: Any, *_: Any) -> Any:
        return SimpleNamespace(offset=self.start[tp.partition])

    def scan(self, topic: str, partition: int, *, start_offset: int, end_offset: int,
             isolation: Any) -> Iterator[pa.RecordBatch]:
        offs = [o for o in range(start_offset, end_offset) if (o + 1) % SIZE]
        yield pa.RecordBatch.from_pydict({
            "key": [None] * len(offs), "value": [f"{partition}:{o}".encode() for o in offs],
            "topic": [topic] * len(offs), "partition": [partition] * len(offs), "offset": offs,
            "timestamp": [1_700_000_000_000 + o for o in offs], "timestampType": [0] * len(offs),
            "headers": [None] * len(offs)}, schema=ROWS)


class World:
    """A catalog in a directory, a history, and how to write, expire and check its table."""

    def __init__(self, root: Path, partitions: int = 2) -> None:
        (root / "wh").mkdir(parents=True, exist_ok=True)
        self.props = {"type": "sql", "uri": f"sqlite:///{root / 'c.db'}", "warehouse": (root / "wh").as_uri()}
        self.catalog: Catalog = load_catalog("rlm", **self.props)
        self.history = History(partitions=partitions)
        self.name = f"x{uuid.uuid4().hex[:8]}"
        self.identifier = f"kafka.{self.name}"

    def config(self, **extra: Any) -> IcebergConfig:
        return IcebergConfig.model_validate({"table_name": self.name, "isolation": "read_uncommitted",
                                             "partition_by": ["partition"], **extra})

    def sync(self, **extra: Any) -> Any:
        from rlm.tables import IcebergSync

        return IcebergSync(self.history, self.catalog, self.config(**extra), self.history.topic)  # type: ignore[arg-type]

    def table(self) -> Table:
        return self.catalog.load_table(self.identifier)

    def rows(self) -> list[tuple[int, int]]:
        """(partition, offset) of every row in the table, sorted (duplicates kept); each row's
        value checked against its offset."""
        t = self.table().scan(selected_fields=("partition", "offset", "value")).to_arrow()
        out = []
        for p, o, v in zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(),
                           t.column("value").to_pylist(), strict=True):
            assert v == f"{p}:{o}".encode()
            out.append((p, o))
        return sorted(out)

    def check(self) -> None:
        """The table equals the tiered history: each readable offset exactly once."""
        rows = self.rows()
        dupes = len(rows) - len(set(rows))
        assert dupes == 0, f"{dupes} of {len(rows)} rows duplicated"
        assert rows == self.history.truth()
        assert_files_present(self.table())

    def check_no_duplicates(self) -> None:
        rows = self.rows()
        assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} rows duplicated"
        assert set(rows) <= set(self.history.truth())

    def expire_all_but_newest(self) -> int:
        t = self.table()
        current = t.current_snapshot()
        keep = current.snapshot_id if current is not None else None
        ids = [s.snapshot_id for s in t.snapshots() if s.snapshot_id != keep]
        if ids:
            t.maintenance.expire_snapshots().by_ids(ids).commit()
        return len(ids)

    def expire_older_than(self, fraction: float) -> None:
        """Expire the snapshots older than the one ``fraction`` of the way through the list."""
        t = self.table()
        snaps = sorted(t.snapshots(), key=lambda s: s.timestamp_ms)
        if len(snaps) < 2:
            return
        cut = snaps[min(len(snaps) - 1, int(len(snaps) * fraction))].timestamp_ms
        t.maintenance.expire_snapshots().older_than(datetime.fromtimestamp(cut / 1000, UTC)).commit()


def assert_files_present(table: Table) -> None:
    """Every data file a retained snapshot references exists (a writer deleted none of them)."""
    for snap in table.snapshots():
        for manifest in snap.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                path = entry.data_file.file_path
                assert table.io.new_input(path).exists(), f"{path} referenced by {snap.snapshot_id} is gone"


def lose_answers(catalog: Catalog, n: int = 1, exc: type[Exception] = CommitFailedException) -> list[int]:
    """Make the catalog commit the next ``n`` appends of segments and then fail the answer, the
    way a retrying client reports a commit whose response was lost (the retry finds the table
    moved on). Returns the list the lost commits are counted into."""
    real = catalog.commit_table
    lost: list[int] = []

    def commit(table: Any, requirements: Any, updates: Any) -> Any:
        resp = real(table, requirements, updates)
        appends = [u for u in updates if getattr(u, "action", "") == "add-snapshot" and u.snapshot.summary
                   and "rlm.segments" in u.snapshot.summary.additional_properties]
        if appends and len(lost) < n:
            lost.append(1)
            raise exc("the commit's answer was lost (a retry found the table changed)")
        return resp

    catalog.commit_table = commit  # type: ignore[method-assign]
    return lost


class Crash(BaseException):
    """A writer killed between its data files and its commit."""


def crash_at(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    calls = [0]

    def hold() -> None:
        calls[0] += 1
        if calls[0] == nth:
            raise Crash

    monkeypatch.setattr(writer_mod, "_hold_before_commit", hold)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# ---- snapshot expiry -------------------------------------------------------------------------

def test_expire_every_snapshot_but_the_newest_then_a_pass_adds_only_new_segments(world: World) -> None:
    h = world.history
    h.tier(0, 4)
    h.tier(1, 3)
    assert world.sync(segments_per_commit=1).run_once().added_segments == 7
    world.check()
    assert world.expire_all_but_newest() == 6
    r = world.sync(segments_per_commit=1).run_once()
    assert r.added_segments == 0
    world.check()
    h.tier(0, 2)
    world.expire_all_but_newest()
    assert world.sync().run_once().added_segments == 2
    world.check()
    # the ledger is the newest metadata's: one property, one range per partition
    props = world.table().properties
    stored = json.loads(props[f"rlm.ledger.{h.topic}"])
    assert stored["p"] == {"0": {"r": [[0, 60]], "n": 6}, "1": {"r": [[0, 30]], "n": 3}}


def test_expiry_by_age_interleaved_with_passes(world: World) -> None:
    h = world.history
    for i in range(5):
        h.tier(i % 2, 2)
        world.sync(segments_per_commit=1).run_once()
        world.check()
        world.expire_older_than(0.5)
        world.sync(segments_per_commit=1).run_once()
        world.check()
    world.expire_all_but_newest()
    assert world.sync().run_once().added_segments == 0
    world.check()


def test_compaction_then_expiry_then_a_pass(world: World) -> None:
    """``rlm iceberg compact`` makes a replace snapshot with no segments the newest one; expiring
    everything older leaves only it: the ledger is still whole."""
    from rlm.tables.compact import compact

    h = world.history
    h.tier(0, 5)
    h.tier(1, 5)
    world.sync(segments_per_commit=1).run_once()
    c = compact(world.catalog, world.identifier, orphan_min_age_s=3600)
    assert c.files_rewritten == 10 and c.files_written == 2
    assert world.sync().run_once().added_segments == 0
    world.expire_all_but_newest()
    assert "rlm.segments" not in world.table().current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    h.tier(1)
    assert world.sync().run_once().added_segments == 1
    world.check()


def test_the_writers_own_row_expiry_survives_snapshot_expiry(world: World) -> None:
    """``iceberg.expire_deleted_segments``: rows below the log start go; after the snapshots
    are expired, the bound is still known (no second delete) and nothing comes back."""
    from rlm.tables.expire import expire_deleted

    h = world.history
    h.tier(0, 3)
    h.tier(1, 3)
    world.sync().run_once()
    h.start[0] = 15
    r = expire_deleted(h, world.catalog, world.identifier, h.topic)  # type: ignore[arg-type]
    assert r.below == {0: 15} and r.rows_removed == 14
    world.check()
    world.expire_all_but_newest()
    assert expire_deleted(h, world.catalog, world.identifier, h.topic).below == {}  # type: ignore[arg-type]
    h.tier(0)
    assert world.sync().run_once().added_segments == 1
    world.check()


# ---- commits whose answer is lost, crashes, racing writers -------------------------------------

@pytest.mark.parametrize("exc", [CommitFailedException, CommitStateUnknownException])
def test_a_commit_whose_answer_is_lost_keeps_its_files(world: World, exc: type[Exception]) -> None:
    """The catalog commits the first append and the client then reports a failure: the writer
    finds its own commit in the ledger, keeps the files its snapshot references, and the pass
    goes on; the snapshots are then expired and a pass adds nothing."""
    h = world.history
    h.tier(0, 3)
    h.tier(1, 2)
    sync = world.sync(segments_per_commit=2)
    lost = lose_answers(sync.catalog, 1, exc)
    r = sync.run_once()
    assert lost == [1]
    assert r.added_segments == 5
    world.check()
    world.expire_all_but_newest()
    assert world.sync().run_once().added_segments == 0
    world.check()


def test_a_crash_before_the_commit_then_expiry_then_a_pass(world: World,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest snapshot after the crash holds partition 0's segment; partition 1's are in
    older snapshots only, which the expiry removes."""
    h = world.history
    h.tier(0, 4)
    h.tier(1, 1)
    world.sync(segments_per_commit=1).run_once()
    h.tier(0, 2)
    crash_at(monkeypatch, 2)
    with pytest.raises(Crash):
        world.sync(segments_per_commit=1).run_once()
    monkeypatch.undo()
    world.check_no_duplicates()
    world.expire_all_but_newest()
    world.sync(segments_per_commit=1).run_once()
    world.check()


def test_a_writer_that_loses_the_race_to_a_writer_whose_snapshots_were_expired(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer A has written its files when B adds every segment and the snapshots are expired;
    A's commit conflicts, A finds its segments taken by another commit, deletes its files and
    adds nothing."""
    from rlm.tables import orphan_files

    h = world.history
    h.tier(0, 3)
    h.tier(1, 3)
    a, b = world.sync(segments_per_commit=1), world.sync(segments_per_commit=1)
    inside = [False]

    def hold() -> None:  # A's first hold: B's whole pass, then the expiry
        if inside[0]:
            return
        inside[0] = True
        assert b.run_once().added_segments == 6
        world.expire_all_but_newest()

    monkeypatch.setattr(writer_mod, "_hold_before_commit", hold)
    r = a.run_once()
    assert r.added_segments == 0 and r.conflicts >= 1
    world.check()
    assert not orphan_files(world.table())  # A deleted its own files, none of B's


def test_two_writers_at_once(world: World) -> None:
    import threading

    h = world.history
    h.tier(0, 4)
    h.tier(1, 4)
    syncs = [world.sync(segments_per_commit=1) for _ in range(2)]
    results: list[Any] = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, syncs[i].run_once()))
               for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(r.added_segments for r in results) == 8
    world.check()
    world.expire_all_but_newest()
    assert world.sync().run_once().added_segments == 0
    world.check()


# ---- a table written by the old ledger form ------------------------------------------------

def old_append(world: World, group: list[Any]) -> None:
    """An append as rlm wrote them before the ledger property: rows, and the segments in the
    snapshot summary only."""
    from rlm.tables.ledger import summary_properties
    from rlm.tables.table import ROW_ORDER, ensure_table, to_rows

    table = ensure_table(world.catalog, world.config(), world.history.topic)
    data = pa.concat_tables([to_rows(b, w.segment_id) for w in group for b in world.history.scan(
        world.history.topic, w.partition, start_offset=w.start, end_offset=w.end, isolation=None)])
    topic_id = world.history.tps[0].topic_id.text
    props = summary_properties(group, topic_id, world.history.topic)
    table.append(data.sort_by(ROW_ORDER), snapshot_properties=props)


def old_table(world: World) -> None:
    """Four old-form appends (a segment each) of partition 0, two of partition 1."""
    from rlm.tables.ledger import SegmentWork

    h = world.history
    h.tier(0, 4)
    h.tier(1, 2)
    for p in (0, 1):
        for link in h.plan(h.tps[p]).segments:
            old_append(world, [SegmentWork(p, link.metadata.remote_log_segment_id.id.text, link.first,
                                           link.last + 1)])
    world.check()
    assert not any(k.startswith("rlm.ledger.") for k in world.table().properties)


def test_a_table_of_the_old_form_migrates_on_its_first_write(world: World) -> None:
    from rlm.tables import read_ledger

    old_table(world)
    h = world.history
    before = read_ledger(world.table(), h.topic)
    h.tier(1, 2)
    assert world.sync().run_once().added_segments == 2  # only the new ones
    world.expire_all_but_newest()
    assert world.sync().run_once().added_segments == 0
    world.check()
    assert (before.source, read_ledger(world.table(), h.topic).source) == ("ancestry", "property")


def test_an_old_table_whose_snapshots_were_already_expired_is_rebuilt_from_its_rows(world: World) -> None:
    """Snapshots expired before the upgrade: neither a property nor a whole ancestry; the ledger
    is rebuilt from the rows (partition, offset, segment id) and nothing is appended twice."""
    from rlm.tables import read_ledger

    old_table(world)
    world.expire_all_but_newest()
    h = world.history
    ledger = read_ledger(world.table(), h.topic)
    h.tier(0)
    assert world.sync().run_once().added_segments == 1
    world.check()
    assert (ledger.source, ledger.segment_count) == ("data", 6)
    assert read_ledger(world.table(), h.topic).source == "property"


def test_a_rollback_is_seen(world: World) -> None:
    """The table rolled back to an earlier snapshot: the property is ahead of the table; the
    ledger is rebuilt from the rows and the rolled-back segments are appended again, once."""
    from rlm.tables import read_ledger

    h = world.history
    h.tier(0, 2)
    world.sync().run_once()
    first = world.table().current_snapshot()
    h.tier(0, 2)
    world.sync().run_once()
    assert first is not None
    world.table().manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    source = read_ledger(world.table(), h.topic).source
    assert world.sync().run_once().added_segments == 2
    world.check()
    assert source == "data"


# ---- random sequences ------------------------------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("tier"), st.integers(0, 1), st.integers(1, 3)),
    st.tuples(st.just("pass"), st.integers(1, 3)),
    st.just(("expire_all",)),
    st.tuples(st.just("expire_older"), st.floats(0.1, 0.9)),
    st.just(("compact",)),
    st.tuples(st.just("crash"), st.integers(1, 3)),
    st.just(("lost",)),
    st.just(("expire_rows",)),
)


def run_ops(world: World, ops: list[tuple[Any, ...]], monkeypatch_hold: Callable[[int | None], None]) -> None:
    from rlm.tables.compact import compact
    from rlm.tables.expire import expire_deleted

    h = world.history
    world.sync()  # (creates the table)
    for op in ops:
        if op[0] == "tier":
            h.tier(op[1], op[2])
        elif op[0] == "pass":
            world.sync(segments_per_commit=op[1]).run_once()
            world.check()
        elif op[0] == "expire_all":
            world.expire_all_but_newest()
        elif op[0] == "expire_older":
            world.expire_older_than(op[1])
        elif op[0] == "compact":
            compact(world.catalog, world.identifier, orphan_min_age_s=3600)
        elif op[0] == "crash":
            monkeypatch_hold(op[1])
            try:
                world.sync(segments_per_commit=1).run_once()
            except Crash:
                pass
            finally:
                monkeypatch_hold(None)
            world.check_no_duplicates()
        elif op[0] == "lost":
            sync = world.sync(segments_per_commit=2)
            lose_answers(sync.catalog, 1)
            sync.run_once()
            world.check()
        elif op[0] == "expire_rows":
            h.start[0] = max(h.start[0], h.end(0) - SIZE - 3)
            expire_deleted(h, world.catalog, world.identifier, h.topic)  # type: ignore[arg-type]
            world.check_no_duplicates()
    world.sync().run_once()
    world.check()


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=10))
def test_random_passes_expiries_compactions_and_crashes(ops: list[tuple[Any, ...]]) -> None:
    real = writer_mod._hold_before_commit

    def hold(nth: int | None) -> None:
        if nth is None:
            writer_mod._hold_before_commit = real
            return
        calls = [0]

        def crash() -> None:
            calls[0] += 1
            if calls[0] == nth:
                raise Crash

        writer_mod._hold_before_commit = crash

    with tempfile.TemporaryDirectory() as root:
        try:
            run_ops(World(Path(root)), [("tier", 0, 2), ("tier", 1, 1), *ops], hold)
        finally:
            writer_mod._hold_before_commit = real
