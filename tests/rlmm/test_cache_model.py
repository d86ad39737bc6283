"""The compact cache against a plain transcription of Kafka's RemoteLogMetadataCache.

``KafkaModel`` follows ``RemoteLogMetadataCache``/``RemoteLogLeaderEpochState`` line by line with
dicts and sets (no performance concerns); random event sequences — including invalid ones,
re-adds, overlapping uploads, deletions in random order, snapshot/restore cycles, and low
compaction thresholds — must give identical answers to every query.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm import _epoch_index, _partition
from rlmm.cache import RemoteLogMetadataCache

S = RemoteLogSegmentState
TP = TopicIdPartition(KafkaUuid(bytes(range(16))), "model", 0)


@dataclass
class _Epoch:
    offset_to_id: dict[int, RemoteLogSegmentId] = field(default_factory=dict)
    unref: set[RemoteLogSegmentId] = field(default_factory=set)
    highest: int | None = None


class KafkaModel:
    def __init__(self) -> None:
        self.mds: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, _Epoch] = {}

    def _e(self, epoch: int) -> _Epoch:
        return self.epochs.setdefault(epoch, _Epoch())

    def apply(self, ev: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate) -> None:
        if isinstance(ev, RemoteLogSegmentMetadata):
            if ev.state is not S.COPY_SEGMENT_STARTED:
                return
            old = self.mds.get(ev.remote_log_segment_id)
            if not S.is_valid_transition(old.state if old else None, ev.state):
                return
            for e, _ in ev.segment_leader_epochs:
                self._e(e).unref.add(ev.remote_log_segment_id)
            self.mds[ev.remote_log_segment_id] = ev
            return
        old = self.mds.get(ev.remote_log_segment_id)
        if old is None or ev.state is S.COPY_SEGMENT_STARTED:
            return
        if not S.is_valid_transition(old.state, ev.state):
            return
        new = RemoteLogSegmentMetadata(old.remote_log_segment_id, old.start_offset, old.end_offset,
                                       old.max_timestamp_ms, ev.broker_id, ev.event_timestamp_ms,
                                       old.segment_size_in_bytes, old.segment_leader_epochs, ev.state,
                                       ev.custom_metadata, old.txn_index_empty)
        sid = ev.remote_log_segment_id
        eps = dict(old.segment_leader_epochs)
        for e, start in old.segment_leader_epochs:
            st_ = self._e(e)
            if ev.state is S.COPY_SEGMENT_FINISHED:
                higher = [o for ep, o in eps.items() if ep > e]
                end = min(higher) - 1 if higher else old.end_offset
                while st_.offset_to_id and max(st_.offset_to_id) >= start and st_.highest is not None \
                        and st_.highest <= end:
                    st_.unref.add(st_.offset_to_id.pop(max(st_.offset_to_id)))
                st_.offset_to_id[start] = sid
                st_.unref.discard(sid)
                if st_.highest is None or end > st_.highest:
                    st_.highest = end
            elif ev.state is S.DELETE_SEGMENT_STARTED:
                if st_.offset_to_id.get(start) == sid:
                    del st_.offset_to_id[start]
                st_.unref.add(sid)
            else:
                st_.unref.discard(sid)
        if ev.state is S.DELETE_SEGMENT_FINISHED:
            del self.mds[sid]
        else:
            self.mds[sid] = new

    def lookup(self, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        st_ = self.epochs.get(epoch)
        if st_ is None:
            return None
        keys = [k for k in st_.offset_to_id if k <= offset]
        if not keys:
            return None
        md = self.mds[st_.offset_to_id[max(keys)]]
        higher = [o for ep, o in md.segment_leader_epochs if ep > epoch]
        end = min(higher) - 1 if higher else md.end_offset
        return None if offset > end else md

    def listing(self, epoch: int) -> list[RemoteLogSegmentMetadata]:
        st_ = self.epochs.get(epoch)
        if st_ is None:
            return []
        return [self.mds[i] for i in list(st_.offset_to_id.values()) + list(st_.unref)]


def _key(md: RemoteLogSegmentMetadata) -> tuple[int, bytes]:
    return md.start_offset, md.remote_log_segment_id.id.raw


def _compare(cache: RemoteLogMetadataCache, model: KafkaModel, epochs: range, max_offset: int,
             stride: int = 3) -> None:
    listed = list(cache.list_remote_log_segments(TP))
    assert sorted(listed, key=_key) == sorted(model.mds.values(), key=_key)
    assert [m.start_offset for m in listed] == sorted(m.start_offset for m in listed)
    for e in epochs:
        got = list(cache.list_remote_log_segments(TP, e))
        assert [m.start_offset for m in got] == sorted(m.start_offset for m in got)
        assert sorted(got, key=_key) == sorted(model.listing(e), key=_key)
        assert cache.remote_log_size(TP, e) == sum(m.segment_size_in_bytes for m in model.listing(e))
        exp_hi = model.epochs[e].highest if e in model.epochs else None
        assert cache.highest_offset_for_epoch(TP, e) == exp_hi
        for off in range(0, max_offset + 2, stride):
            assert cache.remote_log_segment_metadata(TP, e, off) == model.lookup(e, off), (e, off)


def _random_segment(rng: random.Random, max_offset: int, n_epochs: int) -> RemoteLogSegmentMetadata:
    start = rng.randrange(0, max_offset)
    end = rng.randrange(start, min(max_offset, start + 40) + 1)
    first = rng.randrange(n_epochs)
    epochs = {first: start}
    for e in range(first + 1, n_epochs):
        nxt = rng.randrange(start, end + 2)
        if rng.random() < 0.3 and nxt > max(epochs.values()):
            epochs[e] = nxt
    custom = rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))])
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, KafkaUuid(rng.randbytes(16))), start, end,
                                    rng.randrange(10**12), rng.randrange(5), rng.randrange(10**12),
                                    rng.randrange(1, 10**6), tuple(epochs.items()), custom_metadata=custom,
                                    txn_index_empty=rng.random() < 0.5)


def _run(seed: int, steps: int, max_offset: int = 300, n_epochs: int = 4, every: int = 50) -> None:
    rng = random.Random(seed)
    cache, model = RemoteLogMetadataCache(), KafkaModel()
    segments: list[RemoteLogSegmentMetadata] = []
    for step in range(steps):
        r = rng.random()
        if r < 0.3 or not segments:
            md = _random_segment(rng, max_offset, n_epochs)
            segments.append(md)
        elif r < 0.35:
            md = rng.choice(segments)  # re-add (valid only while still COPY_SEGMENT_STARTED)
        else:
            base = rng.choice(segments)
            state = rng.choices(list(S), weights=[1, 8, 5, 5])[0]
            md = RemoteLogSegmentMetadataUpdate(base.remote_log_segment_id, rng.randrange(10**12), state,  # type: ignore[assignment]
                                                rng.randrange(5), rng.choice([None, b"u"]))
        cache.apply(md)
        model.apply(md)
        if rng.random() < 0.02:
            restored = RemoteLogMetadataCache()
            restored.load_snapshot_bytes(cache.to_snapshot_bytes())
            cache = restored
        if step % every == every - 1:
            _compare(cache, model, range(n_epochs + 1), max_offset, stride=max(3, max_offset // 100))
    _compare(cache, model, range(n_epochs + 1), max_offset)


@pytest.fixture
def low_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_partition, "COMPACT_MIN_DEAD", 2)
    monkeypatch.setattr(_epoch_index, "PACK_MIN_TOMBS", 1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32))
def test_cache_matches_kafka_model(low_thresholds: None, seed: int) -> None:
    _run(seed, steps=150)


@pytest.mark.parametrize("seed", range(3))
def test_cache_matches_kafka_model_long_runs(seed: int) -> None:
    _run(seed, steps=3000, max_offset=3000, n_epochs=6, every=1000)


def test_dead_rows_are_compacted_and_hash_index_survives(low_thresholds: None) -> None:
    cache = RemoteLogMetadataCache()
    mds = [RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TP), i * 10, i * 10 + 9, 0, 0, 0, 1,
                                    ((0, i * 10),)) for i in range(200)]
    for md in mds:
        cache.apply(md)
        cache.apply(RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 0, S.COPY_SEGMENT_FINISHED, 0))
    rng = random.Random(1)
    doomed = rng.sample(range(200), 150)
    for i in doomed:
        for st_ in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            assert cache.apply(RemoteLogSegmentMetadataUpdate(mds[i].remote_log_segment_id, 0, st_, 0))
    part = cache._parts[TP]
    assert part.table.n < 200 and part.table.live == 50
    for i in range(200):
        found = cache.segment_metadata(mds[i].remote_log_segment_id)
        assert (found is None) == (i in doomed)
        assert (cache.remote_log_segment_metadata(TP, 0, i * 10 + 5) is None) == (i in doomed)
