"""Server-side assignors of the KIP-848 consumer protocol: ``uniform`` (the default) and ``range``.

With KIP-848 the group coordinator, not a client, computes the *target assignment* each time the
group epoch moves (a member joins, leaves, or changes its subscription; a subscribed topic gains
partitions). Both assignors here follow the properties Kafka's own promise:

- ``uniform``: every subscribed partition goes to exactly one member subscribed to its topic;
  counts differ by at most one among members with the same subscription; a partition stays with
  its previous owner whenever that keeps the balance (stickiness, so a rebalance moves only what
  it must).
- ``range``: per topic, the members subscribed to it (sorted by member id) get contiguous ranges
  of partitions, the first ``partitions % members`` of them one more: members of co-partitioned
  topics get the same partition numbers, which joins rely on.

An assignment is ``{member id: {topic id: frozenset(partitions)}}``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

Assignment = dict[uuid.UUID, frozenset[int]]

#: names a client may put in ``group.remote.assignor`` (Kafka's two built-in assignors)
ASSIGNORS = ("uniform", "range")


def assign(
    name: str,
    members: Mapping[str, Sequence[str]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment of ``members`` (member id -> subscribed topic names) over ``topics``
    (name -> (topic id, partition count)); ``previous`` is the last target (stickiness)."""
    if name == "range":
        return _range(members, topics)
    if name == "uniform":
        return _uniform(members, topics, previous)
    raise ValueError(f"unknown assignor {name!r}")


def _range(members: Mapping[str, Sequence[str]], topics: Mapping[str, tuple[uuid.UUID, int]]) -> dict[
        str, Assignment]:
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for name, (tid, count) in sorted(topics.items()):
        subs = sorted(m for m, wanted in members.items() if name in wanted)
        if not subs:
            continue
        base, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = base + (1 if i < extra else 0)
            if n:
                out[m].setdefault(tid, set()).update(range(start, start + n))
            start += n
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


def _uniform(
    members: Mapping[str, Sequence[str]],
    topics: Mapping[str, tuple[uuid.UUID, int]],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Balanced and sticky: keep previous owners up to a fair share, then hand out the rest to
    the least loaded eligible member (ties by member id, so every process computes the same)."""
    order = sorted(members)
    subscribers = {name: [m for m in order if name in members[m]] for name in topics}
    partitions = [(name, tid, p) for name, (tid, count) in sorted(topics.items()) for p in range(count)
                  if subscribers[name]]
    # a member's fair share: its eligible partitions spread over the members that may take them;
    # exact for the usual homogeneous group (floor/ceil of total / members)
    total = len(partitions)
    homogeneous = len({tuple(sorted(set(members[m]) & set(topics))) for m in order}) <= 1
    quota: dict[str, int] = {}
    if homogeneous and order:
        base, extra = divmod(total, len(order))
        # members that already hold more than the floor keep the "+1" slots first (stickiness)
        held = {m: sum(len(ps) for ps in previous.get(m, {}).values()) for m in order}
        ranked = sorted(order, key=lambda m: (-min(held[m], base + 1), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    load = dict.fromkeys(order, 0)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    prev_owner = {(tid, p): m for m, a in previous.items() for tid, ps in a.items() for p in ps}
    for name, tid, p in partitions:  # 1. stickiness, within the quota
        m = prev_owner.get((tid, p))
        if m is None or m not in members or name not in members[m]:
            continue
        if homogeneous and load[m] >= quota[m]:
            continue
        owner[(tid, p)] = m
        load[m] += 1
    for name, tid, p in partitions:  # 2. the rest, to the least loaded eligible member
        if (tid, p) in owner:
            continue
        eligible = subscribers[name]
        if homogeneous:
            eligible = [m for m in eligible if load[m] < quota[m]] or eligible
        m = min(eligible, key=lambda x: (load[x], x))
        owner[(tid, p)] = m
        load[m] += 1
    if not homogeneous:
        _even_out(owner, load, subscribers, partitions)
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in order}
    for (tid, p), m in owner.items():
        out[m].setdefault(tid, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


def _even_out(owner: dict[tuple[uuid.UUID, int], str], load: dict[str, int],
              subscribers: Mapping[str, list[str]], partitions: list[tuple[str, uuid.UUID, int]]) -> None:
    """Heterogeneous subscriptions: move single partitions from a member to an eligible one with
    at least two fewer, until no such move exists (each move lowers the spread, so it ends)."""
    moved = True
    while moved:
        moved = False
        for name, tid, p in partitions:
            m = owner[(tid, p)]
            best = min(subscribers[name], key=lambda x: (load[x], x))
            if load[best] + 1 < load[m]:
                owner[(tid, p)] = best
                load[m] -= 1
                load[best] += 1
                moved = True
