"""Which batches the cleaner may discard because of transactions, and which it keeps for producers.

Two rules of Kafka's cleaner, walked once per batch in offset order (per *batch*, not per record):

* ``CleanedTransactionMetadata`` (``LogCleaner.scala``; ``Cleaner.java`` /
  ``CleanedTransactionMetadata.java`` in Kafka 4.x): aborted transactions (from the transaction
  indexes) become "ongoing aborted" once the walk reaches their first offset; a transactional
  data batch of such a producer is aborted (``onBatchRead`` -> discardable), any other
  transactional batch marks the producer's transaction as committed-and-seen. At a marker
  (``onControlBatchRead``): an ABORT whose batches were seen is kept this pass and its aborted
  transaction re-indexed; an ABORT or COMMIT with no batch of its transaction left is discardable
  (it is removed once its delete horizon has passed); an empty control batch is discardable.
* ``isBatchLastRecordOfProducer`` (in the cleaner's ``checkBatchRetention``): the batch holding an
  active producer's last data offset, or the marker carrying its last epoch when it has no data
  offset, is kept (as an empty header if all its records go) so that idempotent producers keep
  their sequence state across the cleaned range.

One rule Kafka's cleaner does not need: an aborted transaction ends at its entry's last offset
(the ABORT marker's) even when the walk never meets that marker. On a broker's log an entry exists
only beside its marker, but a compacted topic's remote history can hold the data and an entry
(rlm.daemon.aborts_ahead) while the broker's cleaner dropped the marker (its delete horizon
passed) before its segment was tiered; without the rule the producer's later, committed,
transactional batches would be discarded as aborted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rlm.log.model import BatchHeader, ControlRecordType
from rlm.log.producer_state import ProducerStateTracker
from rlm.log.txn_index import AbortedTxn

__all__ = ["ProducerLast", "TransactionWalk", "aborted_from_markers", "last_batches_of_producers"]


@dataclass(frozen=True, slots=True)
class ProducerLast:
    """An active producer's last appended state, as ``ProducerStateEntry`` reports it:
    ``last_data_offset`` None when its current epoch has no data batch (its last entry is a marker)."""

    producer_epoch: int
    last_data_offset: int | None

    def keeps(self, header: BatchHeader) -> bool:
        """True if ``header`` is the batch the cleaner must keep for this producer."""
        if self.last_data_offset is not None:
            return header.last_offset == self.last_data_offset
        return header.is_control and header.producer_epoch == self.producer_epoch


def last_batches_of_producers(headers: Iterable[BatchHeader]) -> dict[int, ProducerLast]:
    """Producer state derived from the batches themselves (used when the caller has no producer
    snapshot): the last data batch of each producer's latest epoch, else its last marker's epoch."""
    out: dict[int, ProducerLast] = {}
    for h in headers:
        if h.producer_id < 0:
            continue
        prev = out.get(h.producer_id)
        if h.is_control:
            keep_data = prev is not None and prev.producer_epoch == h.producer_epoch
            data_offset = prev.last_data_offset if keep_data and prev is not None else None
            out[h.producer_id] = ProducerLast(h.producer_epoch, data_offset)
        else:
            out[h.producer_id] = ProducerLast(h.producer_epoch, h.last_offset)
    return out


@dataclass
class _Aborted:
    txn: AbortedTxn
    seen_batch: bool = False


@dataclass
class TransactionWalk:
    """The cleaner's transaction bookkeeping over one pass; feed every batch in offset order."""

    aborted: Sequence[AbortedTxn]
    _pending: deque[AbortedTxn] = field(init=False)
    _ongoing_aborted: dict[int, _Aborted] = field(init=False, default_factory=dict)
    _ongoing_committed: set[int] = field(init=False, default_factory=set)
    reindexed: list[AbortedTxn] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._pending = deque(sorted(self.aborted, key=lambda t: t.first_offset))

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            if self._ongoing(txn.producer_id, txn.first_offset) is None:
                self._ongoing_aborted[txn.producer_id] = _Aborted(txn)

    def _ongoing(self, producer_id: int, offset: int) -> _Aborted | None:
        """The producer's aborted transaction still open at ``offset``; one that ended below it
        (its marker was never walked: removed before tiering) is forgotten."""
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None and ongoing.txn.last_offset < offset:
            del self._ongoing_aborted[producer_id]
            return None
        return ongoing

    def data_batch(self, header: BatchHeader) -> bool:
        """``onBatchRead``: True if the batch belongs to an aborted transaction (discardable)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing(header.producer_id, header.base_offset)
        if ongoing is not None:
            ongoing.seen_batch = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def control_batch(self, header: BatchHeader, kind: ControlRecordType | int | None) -> bool:
        """``onControlBatchRead``: True if the marker may go (once its delete horizon has passed).
        ``kind`` is the marker's type, None for an empty control batch."""
        self._reach(header.last_offset)
        if kind is None:
            return True  # an empty control batch was cleaned before: safe to discard
        if kind == ControlRecordType.ABORT:
            self._ongoing(header.producer_id, header.base_offset)
            ongoing = self._ongoing_aborted.pop(header.producer_id, None)
            if ongoing is not None and ongoing.seen_batch:
                self.reindexed.append(ongoing.txn)
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            seen = header.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(header.producer_id)
            return not seen
        return False


def aborted_from_markers(batches: Iterable[tuple[BatchHeader, int | None]]) -> list[AbortedTxn]:
    """Aborted transactions whose ABORT marker is among ``batches`` ((header, control type) pairs
    in offset order), from the batches alone (``ProducerStateTracker``, as the broker builds its
    ``.txnindex``). The engine adds them to the caller's list, so aborted data whose marker is in
    the input goes even if a ``.txnindex`` was not passed; a marker beyond the input still needs
    the caller's entry."""
    tracker: ProducerStateTracker | None = None
    for header, kind in batches:
        if tracker is None:
            tracker = ProducerStateTracker(map_end_offset=header.base_offset)
        marker = (kind, 0, header.max_timestamp) if header.is_control and kind is not None else None
        tracker.append(header, marker)
    return list(tracker.aborted) if tracker is not None else []


def producers_from(entries: Mapping[int, ProducerLast] | None,
                   headers: Iterable[BatchHeader]) -> dict[int, ProducerLast]:
    """The caller's producer state if given, else the one derived from the batches."""
    return dict(entries) if entries is not None else last_batches_of_producers(headers)
