"""``rlm restore``: transactions open at the restored end are aborted, as the old cluster would have.

A transaction whose records lie in the restored segments but whose COMMIT/ABORT marker was in the
part of the log that was never tiered is **open** in the restored producer snapshot
(``current_txn_first_offset``). The old cluster's transaction coordinator would have ended it;
the new cluster's coordinator has no state for it (``__transaction_state`` is not restored), so
nothing ever would: the partition's last stable offset would stay at its first offset forever and
``read_committed`` consumers would stop there. The outcome the old cluster reaches when the
producer never finishes is the coordinator's **abort by timeout** (``transaction.timeout.ms``),
which fences the producer (epoch + 1) and writes an ABORT marker. Restore writes what that
abort leaves on the partition, so ``read_committed`` consumers of the new broker read what they
would have read from the old one after the timeout:

* one ABORT control batch per open transaction, in the order the transactions began, at the old
  end offset onwards, in the empty active segment restore leaves there (the restored segments
  stay byte for byte the remote ones), with the producer's epoch + 1, its coordinator epoch and
  the last restored leader epoch;
* the active segment's ``.txnindex`` entry for each (first offset, marker offset, and the last
  stable offset after it, as Kafka's ``ProducerStateManager`` computes it);
* a producer snapshot at the new end offset without the open transactions (each producer at its
  bumped epoch with no batch of it retained, as after a marker of a new epoch), so the broker
  loads the aborted state without replaying anything.

A committed transaction cannot be told apart from an aborted one here (its marker is what was
lost): abort is the only outcome a broker can reach on its own, so that is the one written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rlm.log.encode import encode_control_batch
from rlm.log.model import ControlRecordType
from rlm.log.producer_snapshot import ProducerSnapshotEntry, encode_snapshot, read_snapshot
from rlm.log.txn_index import AbortedTxn, encode_txn_index

_MAX_EPOCH = 32767


@dataclass(frozen=True)
class AbortPlan:
    """What aborting the open transactions at ``next_offset`` writes."""

    next_offset: int
    aborted: list[AbortedTxn]
    log: bytes
    snapshot: list[ProducerSnapshotEntry]

    @property
    def end_offset(self) -> int:
        return self.next_offset + len(self.aborted)


def plan_aborts(snapshot: Path, next_offset: int, leader_epoch: int, now_ms: int | None = None) -> AbortPlan:
    """The markers, index entries and snapshot that end every transaction open in ``snapshot``
    (the restored producer snapshot at ``next_offset``)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    entries = read_snapshot(snapshot)
    open_txns = sorted((e for e in entries if e.current_txn_first_offset >= 0),
                       key=lambda e: e.current_txn_first_offset)
    log = bytearray()
    aborted: list[AbortedTxn] = []
    ended: dict[int, ProducerSnapshotEntry] = {}
    for i, e in enumerate(open_txns):
        offset = next_offset + i
        epoch = min(e.producer_epoch + 1, _MAX_EPOCH)
        log += encode_control_batch(offset=offset, producer_id=e.producer_id, producer_epoch=epoch,
                                    control_type=ControlRecordType.ABORT,
                                    coordinator_epoch=e.coordinator_epoch, timestamp=now,
                                    partition_leader_epoch=leader_epoch)
        later = [o.current_txn_first_offset for o in open_txns[i + 1:]]
        aborted.append(AbortedTxn(e.producer_id, e.current_txn_first_offset, offset,
                                  min(later) if later else offset + 1))
        ended[e.producer_id] = replace(e, producer_epoch=epoch, last_sequence=-1, last_offset=-1,
                                       offset_delta=0, timestamp=now, current_txn_first_offset=-1)
    after = [ended.get(e.producer_id, e) for e in entries]
    return AbortPlan(next_offset, aborted, bytes(log), after)


def write_aborts(pdir: Path, plan: AbortPlan, write: Callable[..., None]) -> list[str]:
    """Write ``plan`` into the partition directory (``write(path, data=...)`` is restore's atomic
    writer); nothing when no transaction is open or when an earlier run wrote it already."""
    if not plan.aborted:
        return []
    log = pdir / f"{plan.next_offset:020d}.log"
    if log.exists() and log.stat().st_size > 0:
        return []  # a rerun: the markers are there (restore leaves the active segment empty)
    names = [f"{plan.next_offset:020d}.txnindex", f"{plan.end_offset:020d}.snapshot", log.name]
    write(pdir / names[0], data=encode_txn_index(plan.aborted))
    write(pdir / names[1], data=encode_snapshot(plan.snapshot))
    write(log, data=plan.log)  # the markers last: once they are there, the abort is whole
    return names
