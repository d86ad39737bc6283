"""The lineage rules shared by the read core and the expirer (:mod:`rlm.lineage`).

The first tests are the cases seen on real clusters (a returning leader whose broker checkpoint
covers only its local log; an unclean election's diverged tail); the property test generates
random leadership histories — one true lineage, diverged branches of unclean elections, remote
segments of both, a leader's checkpoint truncated at its local log start, remembered histories —
and checks that no segment of the true history is ever a deletion candidate, that dropping the
candidates leaves every readable offset readable, and that reads follow the true lineage
wherever it can be observed.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.daemon.quarantine import OffLineageQuarantine
from rlm.lineage import (
    chain,
    epochs_for_range,
    judge_segments,
    lineage_from_segments,
    lineage_last_offset,
    merge_lineage,
)
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(KafkaUuid.random(), "t", 0)
Epochs = list[tuple[int, int]]


def seg(start: int, end: int, epochs: Epochs) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(TP), start, end, 0, 1, 0, 10, tuple(epochs),
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def truncated_front(epochs: Epochs, local_start: int) -> Epochs:
    """A broker's checkpoint after local retention moved its log start (Kafka's truncateFromStart)."""
    return epochs_for_range(epochs, local_start, 1 << 62)


def test_returning_leader_keeps_the_other_leaders_segments() -> None:
    """The issue's case: A's checkpoint starts epoch 5 at A's local log start (12593), though B
    led epoch 5 from 12262; B's segments below A's local log start are on the lineage."""
    a_epochs = [(4, 9000), (5, 12262), (6, 14071)]
    a_old = seg(9000, 12261, [(4, 9000)])
    b_segs = [seg(12262, 12500, [(5, 12262)]), seg(12501, 12800, [(5, 12501)])]
    checkpoint = truncated_front(a_epochs, 12593)
    assert checkpoint == [(5, 12593), (6, 14071)]
    lineage = merge_lineage([[(4, 9000)], *(m.segment_leader_epochs for m in [a_old, *b_segs])], checkpoint)
    assert lineage == a_epochs
    verdict = judge_segments([a_old, *b_segs], lineage)
    assert not verdict.off_lineage
    # and with no memory at all (a cold restart): the remote segments alone are enough
    lineage = merge_lineage([m.segment_leader_epochs for m in [a_old, *b_segs]], checkpoint)
    assert lineage == a_epochs


def test_diverged_tail_is_a_candidate_only_when_no_read_needs_it() -> None:
    """Unclean election: the old leader tiered epoch 5 up to 200, the new leader (epoch 6 from 150)
    had only 100..149. The old segment is needed while it is the only copy of 100..149."""
    old = seg(100, 200, [(5, 100)])
    new_b = seg(150, 250, [(6, 150)])
    lineage = merge_lineage([old.segment_leader_epochs, new_b.segment_leader_epochs], [(5, 100), (6, 150)])
    assert lineage_last_offset(old, lineage) == 149
    assert not judge_segments([old, new_b], lineage).off_lineage, "the only copy of 100..149 is kept"
    new_a = seg(100, 149, [(5, 100)])
    verdict = judge_segments([old, new_a, new_b], lineage)
    assert verdict.off_lineage == (old,)


def test_checkpoint_is_exact_after_its_first_entry() -> None:
    """Two unclean elections: epoch 6 (remembered) died when epoch 7's leader, which never had it,
    took over at 171; the leader's checkpoint says so and wins over the remembered history."""
    lineage = merge_lineage([[(5, 100), (6, 151)]], [(5, 160), (7, 171)])
    assert lineage == [(5, 100), (7, 171)]
    assert merge_lineage([[(5, 100), (6, 151)]], []) == [(5, 100), (6, 151)]


def test_newer_epochs_than_the_checkpoint_stay() -> None:
    """A segment of an epoch newer than any the broker knows (its view is stale) is on the lineage."""
    lineage = merge_lineage([[(5, 100)], [(7, 300)]], [(5, 100), (6, 200)])
    assert lineage == [(5, 100), (6, 200), (7, 300)]
    assert lineage_last_offset(seg(300, 350, [(7, 300)]), lineage) == 350


def test_contained_duplicate_does_not_break_the_chain() -> None:
    """A copy inside another (leaders rolled segments differently) is read by neither."""
    big, small = seg(0, 99, [(0, 0)]), seg(50, 60, [(0, 50)])
    links, gaps = chain([big, small], [(0, 0)])
    assert [(m, a, b) for m, a, b in links] == [(big, 0, 99)] and gaps == []


# ---- the property test ------------------------------------------------------------------------


def epoch_at(epochs: Epochs, offset: int) -> int:
    starts = [s for _, s in epochs]
    return epochs[bisect.bisect_right(starts, offset) - 1][0]


@st.composite
def histories(draw: st.DrawFn) -> dict[str, object]:
    """One true lineage (epochs 0, 2, 4, ...), up to two diverged branches, segments of both."""
    n = draw(st.integers(1, 6))
    gaps = draw(st.lists(st.integers(0, 40), min_size=n - 1, max_size=n - 1))
    starts = [0]
    for g in gaps:
        starts.append(starts[-1] + g)
    true = [(2 * i, s) for i, s in enumerate(starts)]
    leo = starts[-1] + draw(st.integers(1, 60))
    branches: list[tuple[Epochs, int]] = []
    for _ in range(draw(st.integers(0, 2))):
        if n < 2:
            break
        i = draw(st.integers(0, n - 2))  # the branch's leader kept epoch 2i past the next start
        nxt = starts[i + 1]
        if starts[i] == nxt:
            continue
        end = nxt + draw(st.integers(0, 40))
        hist = true[: i + 1]
        if draw(st.booleans()):  # it also started epoch 2i+1 (at or after the true next start)
            hist = [*hist, (2 * i + 1, nxt + draw(st.integers(0, max(0, end - nxt))))]
        branches.append((hist, end))
    segments: list[RemoteLogSegmentMetadata] = []
    truth: list[RemoteLogSegmentMetadata] = []
    for _ in range(draw(st.integers(0, 8))):
        a = draw(st.integers(0, leo - 1))
        b = draw(st.integers(a, min(leo - 1, a + 50)))
        m = seg(a, b, epochs_for_range(true, a, b + 1))
        truth.append(m)
        segments.append(m)
    for hist, end in branches:
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.integers(0, end))
            b = draw(st.integers(a, end))
            segments.append(seg(a, b, epochs_for_range(hist, a, b + 1)))
    local_start = draw(st.integers(0, leo))
    authority = truncated_front(true, local_start) if draw(st.booleans()) else []
    remembered = truncated_front(true, draw(st.integers(0, leo))) if draw(st.booleans()) else []
    return {
        "true": true, "leo": leo, "segments": segments, "truth": truth,
        "authority": authority, "local_start": local_start, "remembered": remembered,
    }


def covered(links: list[tuple[RemoteLogSegmentMetadata, int, int]]) -> set[int]:
    return {o for _, a, b in links for o in range(a, b + 1)}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_lineage_never_drops_true_history(h: dict[str, object]) -> None:
    true: Epochs = h["true"]  # type: ignore[assignment]
    segments: list[RemoteLogSegmentMetadata] = h["segments"]  # type: ignore[assignment]
    truth: list[RemoteLogSegmentMetadata] = h["truth"]  # type: ignore[assignment]
    authority: Epochs = h["authority"]  # type: ignore[assignment]
    remembered: Epochs = h["remembered"]  # type: ignore[assignment]
    leo: int = h["leo"]  # type: ignore[assignment]
    lineage = merge_lineage([remembered, *(m.segment_leader_epochs for m in segments)], authority, leo)
    verdict = judge_segments(segments, lineage)
    # 1. no segment of the true history is ever a deletion candidate
    off = {m.remote_log_segment_id for m in verdict.off_lineage}
    assert not [m for m in truth if m.remote_log_segment_id in off], (lineage, verdict.off_lineage)
    # 2. dropping every candidate leaves every readable offset readable, and a reader without a
    # broker still reads all of the true history
    kept = list(verdict.kept)
    assert covered(chain(kept, lineage)[0]) == covered(chain(segments, lineage)[0])
    in_truth = {o for m in truth for o in range(m.start_offset, m.end_offset + 1)}
    assert in_truth <= covered(chain(kept, lineage_from_segments(kept))[0])
    # 3. wherever the truth is observable (a true segment holds the offset, or the leader's own
    # log does), a read returns the true lineage's records, for the daemon and for readers
    local_start: int = h["local_start"]  # type: ignore[assignment]
    in_local = set(range(local_start, leo)) if authority else set()
    for lin, observable in ((lineage, in_truth | in_local), (lineage_from_segments(segments), in_truth)):
        for m, a, b in chain(segments, lin)[0]:
            for o in range(a, b + 1):
                if o in observable:
                    assert epoch_at(list(m.segment_leader_epochs), o) == epoch_at(true, o), (o, m, lin)


def test_corrupt_quarantine_file_restarts_the_grace_never_deletes_early(tmp_path: Path) -> None:
    """Garbage in ``work_dir/quarantine`` is read as "nothing seen yet": the grace period starts
    again (later deletion, never earlier), and the file is rewritten whole."""
    q = OffLineageQuarantine(tmp_path)
    off = seg(100, 200, [(5, 100)])
    due, held = q.review(TP, [off], grace_ms=1000, now_ms=10_000)
    assert (due, [h.segment_id for h in held]) == ([], [off.remote_log_segment_id.id.text])
    path = next((tmp_path / "quarantine").iterdir())
    for garbage in (b"\x00\xff not json", b"[1, 2]", b'{"x": "not a number"}'):
        path.write_bytes(garbage)
        due, held = q.review(TP, [off], grace_ms=1000, now_ms=20_000)
        assert due == [] and held[0].first_seen_ms == 20_000
    due, _ = q.review(TP, [off], grace_ms=1000, now_ms=21_000)
    assert due == [off], "the grace counted from the restart ends"
