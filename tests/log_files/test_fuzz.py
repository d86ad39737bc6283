"""Random, truncated and bit-flipped files of every type: the typed error or valid data, never
another exception, a hang or data that breaks the format's invariants. Files with a checksum
(producer snapshots) must reject every flip and every truncation."""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.commands.dump import dump_lines
from rlm.errors import CheckpointFormatError, IndexFormatError, LogFormatError, SnapshotFormatError
from rlm.log import checkpoints as ckpt
from rlm.log.lookup import find_offset, find_offset_for_timestamp
from rlm.log.lso import stable_offsets
from rlm.log.offset_index import encode_offset_index, parse_offset_index
from rlm.log.partition import PartitionDir
from rlm.log.producer_snapshot import ProducerSnapshotEntry, encode_snapshot, parse_snapshot
from rlm.log.time_index import encode_time_index, parse_time_index
from rlm.log.txn_index import AbortedTxn, encode_txn_index, parse_txn_index
from rlm.log.writer import PartitionWriter, WriterConfig
from rlm.types import KafkaUuid, TopicPartition
from tests.log_files._data import Clock

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> tuple[bytes, bytes, str]:
    """(original, mutated, kind) with kind in truncate / flip / append / random."""
    data = draw(valid)
    kind = draw(st.sampled_from(["truncate", "flip", "append", "random"]))
    if kind == "truncate" and data:
        return data, data[:draw(st.integers(0, len(data) - 1))], kind
    if kind == "flip" and data:
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= 1 << draw(st.integers(0, 7))
        return data, bytes(out), kind if out != data else "none"
    if kind == "append":
        return data, data + draw(st.binary(min_size=1, max_size=40)), kind
    return data, draw(st.binary(max_size=300)), "random"


@st.composite
def offset_index_bytes(draw: st.DrawFn) -> bytes:
    rels = sorted(set(draw(st.lists(st.integers(1, 10**6), max_size=30))))
    poss = sorted(set(draw(st.lists(st.integers(1, 10**8), min_size=len(rels), max_size=len(rels)))))
    n = min(len(rels), len(poss))
    return encode_offset_index([(1000 + r, p) for r, p in zip(rels[:n], poss[:n], strict=True)], 1000)


@st.composite
def time_index_bytes(draw: st.DrawFn) -> bytes:
    ts = sorted(set(draw(st.lists(st.integers(0, 2**50), max_size=30))))
    offs = sorted(draw(st.lists(st.integers(0, 10**6), min_size=len(ts), max_size=len(ts))))
    return encode_time_index([(t, 1000 + o) for t, o in zip(ts, offs, strict=True)], 1000)


@st.composite
def txn_index_bytes(draw: st.DrawFn) -> bytes:
    lasts = sorted(set(draw(st.lists(st.integers(1000, 10**9), max_size=10))))
    out = []
    for last in lasts:
        first = draw(st.integers(0, last))
        out.append(AbortedTxn(draw(st.integers(0, 2**40)), first, last, draw(st.integers(0, last + 1))))
    return encode_txn_index(out)


snapshot_entries = st.builds(ProducerSnapshotEntry, st.integers(0, 2**62), st.integers(-1, 2**15 - 1),
                             I32, I64, I32, I64, I32, I64)
snapshot_bytes = st.lists(snapshot_entries, max_size=8, unique_by=lambda e: e.producer_id).map(
    encode_snapshot)


def _epochs(xs: list[tuple[int, int]]) -> bytes:
    entries, epoch, start = [], -1, 0
    for de, do in xs:
        epoch, start = epoch + 1 + de, start + do
        entries.append(ckpt.EpochEntry(epoch, start))
    return ckpt.encode_leader_epoch_checkpoint(entries)


epoch_bytes = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 10**6)), max_size=6).map(_epochs)
topics = st.from_regex(r"[a-z._-]{1,12}", fullmatch=True)
offsets_bytes = st.dictionaries(st.tuples(topics, st.integers(0, 99)), st.integers(0, 2**62), max_size=6).map(
    lambda d: ckpt.encode_offset_checkpoint({TopicPartition(t, p): o for (t, p), o in d.items()}))
uuid_text = st.binary(min_size=16, max_size=16).filter(lambda b: any(b)).map(lambda b: KafkaUuid(b).text)


def _meta(cluster: str, node: int, dir_id: str) -> bytes:
    return ckpt.encode_meta_properties(ckpt.MetaProperties(1, cluster, node, KafkaUuid.from_text(dir_id)))


meta_bytes = st.builds(_meta, st.from_regex(r"[A-Za-z0-9_-]{22}", fullmatch=True), st.integers(0, 2**31 - 1),
                       uuid_text)


def _check_offset_index(data: bytes) -> None:
    for stale in (False, True):
        try:
            idx = parse_offset_index(data, 1000, stale_tail_ok=stale)
        except IndexFormatError as e:
            assert e.position is not None and 0 <= e.position <= len(data)
            continue
        assert np.all(np.diff(idx.offsets) > 0) and np.all(np.diff(idx.positions) > 0)
        assert np.all(idx.offsets >= 1000) and np.all(idx.positions >= 0)


def _check_time_index(data: bytes) -> None:
    for stale in (False, True):
        try:
            ti = parse_time_index(data, 1000, stale_tail_ok=stale)
        except IndexFormatError:
            continue
        assert np.all(np.diff(ti.timestamps) > 0) and np.all(np.diff(ti.offsets) >= 0)


@FUZZ
@given(mutated(offset_index_bytes()))
def test_offset_index_fuzz(case: tuple[bytes, bytes, str]) -> None:
    _check_offset_index(case[1])


@FUZZ
@given(mutated(time_index_bytes()))
def test_time_index_fuzz(case: tuple[bytes, bytes, str]) -> None:
    _check_time_index(case[1])


@FUZZ
@given(mutated(txn_index_bytes()))
def test_txn_index_fuzz(case: tuple[bytes, bytes, str]) -> None:
    try:
        entries = parse_txn_index(case[1], base_offset=1000)
    except IndexFormatError:
        return
    assert all(0 <= a.first_offset <= a.last_offset and a.last_offset >= 1000 for a in entries)
    assert all(a.last_offset < b.last_offset for a, b in itertools.pairwise(entries))


@FUZZ
@given(mutated(snapshot_bytes))
def test_snapshot_fuzz(case: tuple[bytes, bytes, str]) -> None:
    original, data, kind = case
    if kind in ("truncate", "flip", "append"):
        with pytest.raises(SnapshotFormatError):
            parse_snapshot(data)
        return
    with contextlib.suppress(SnapshotFormatError):
        parse_snapshot(data)
    assert parse_snapshot(original) is not None


CHECKPOINT_PARSERS: dict[str, tuple[st.SearchStrategy[bytes], Callable[[bytes], object]]] = {
    "leader-epoch": (epoch_bytes, ckpt.parse_leader_epoch_checkpoint),
    "offsets": (offsets_bytes, ckpt.parse_offset_checkpoint),
    "partition.metadata": (uuid_text.map(lambda u: ckpt.encode_partition_metadata(KafkaUuid.from_text(u))),
                           ckpt.parse_partition_metadata),
    "meta.properties": (meta_bytes, ckpt.parse_meta_properties),
    "clean-shutdown": (st.integers(-1, 2**40).map(ckpt.encode_clean_shutdown), ckpt.parse_clean_shutdown),
}


@pytest.mark.parametrize("kind", sorted(CHECKPOINT_PARSERS))
def test_checkpoint_fuzz(kind: str) -> None:
    strategy, parse = CHECKPOINT_PARSERS[kind]

    @FUZZ
    @given(mutated(strategy))
    def run(case: tuple[bytes, bytes, str]) -> None:
        parse(case[0])  # the valid file parses
        try:
            parse(case[1])
        except CheckpointFormatError as e:
            assert e.position is not None

    run()


@pytest.fixture(scope="module")
def small_partition(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fz") / "fz-0"
    w = PartitionWriter(d, topic_id=KafkaUuid.random(), clock=Clock(),
                        config=WriterConfig(segment_bytes=3000, index_interval_bytes=200))
    for i in range(40):
        w.append([(b"k", bytes(50 + i)), (None, None)], producer_id=1 if i % 3 else -1, producer_epoch=0,
                 transactional=i % 3 == 1)
        if i % 3 == 1:
            w.end_transaction(1, 0, commit=i % 2 == 0)
    w.close()
    return d


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_partition_readers_on_a_damaged_file(small_partition: Path, tmp_path_factory: pytest.TempPathFactory,
                                              data: st.DataObject) -> None:
    """Damage one file of a partition dir: lookups, LSO and snapshots give a typed error or an answer."""
    d = tmp_path_factory.mktemp("dmg") / "fz-0"
    shutil.copytree(small_partition, d)
    victim = data.draw(st.sampled_from(sorted(d.iterdir())))
    _original, damaged, _ = data.draw(mutated(st.just(victim.read_bytes())))
    victim.write_bytes(damaged)
    p = PartitionDir(d)
    for op in (lambda: stable_offsets(p, high_watermark=None), lambda: find_offset(p, 17),
               lambda: find_offset_for_timestamp(p, Clock().now + 50), lambda: p.leader_epochs(),
               lambda: [p.max_timestamp(s) for s in p.segments],
               lambda: list(dump_lines(victim, as_json=True))):
        with contextlib.suppress(LogFormatError):
            op()
