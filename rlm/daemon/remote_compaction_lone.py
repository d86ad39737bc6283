"""A remote compaction of a single segment: when its output may replace its input.

Why it needs rules of its own. A compaction of two or more segments makes a segment whose range
is strictly larger than each input's, and that alone makes every reader read it
(:func:`rlm.lineage.replaced_by`). A lone dirty segment — the only tiered segment of a quiet
partition, with superseded updates or tombstones past their delete horizon — would wait for the
next tiered segment, which on a quiet partition never comes. Its output keeps the input's range
(the offsets after it are the broker's, not yet tiered: extending the range would claim them),
so readers must tell the two copies of one range apart: between copies of the very same range
they read the one *finished later* (:func:`rlm.lineage.finished_later`, Kafka's own rule in
``RemoteLogMetadataCache``), and the earlier one is replaced when the sizes differ (an exact
duplicate of the copier's stays kept, as before). That holds only if the output really finishes
later, so:

* the job compacts a lone segment only once its own clock is :data:`LONE_MARGIN_MS` past the
  input's finish time (``event_timestamp_ms``): another node's clock running ahead, or an input
  copied a moment ago, makes it wait a run; the margin also keeps the order after
  ``rlm metadata rebuild``, which takes the objects' times (second-granular on S3);
* the output is published only if its size differs from the input's: a same-size output would
  be an exact duplicate to every reader (both kept, both counted by retention). An output equal
  to its input (nothing removed, nothing re-framed) or of the same size is not published, and the
  segment is remembered (in memory: a restart compacts it once more) so that it is not compacted
  again every run while nothing else changes.

A crash between the output's COPY_SEGMENT_FINISHED and the input's delete leaves both FINISHED;
readers read the output, and the next run deletes the input as ``replaced``, as for larger ranges.
"""

from __future__ import annotations

import structlog

from rlm.compaction import CompactionResult
from rlm.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

log = structlog.get_logger(__name__)

#: a lone segment is compacted only when the daemon's clock is this far past its finish time
LONE_MARGIN_MS = 2000


def lone_ready(md: RemoteLogSegmentMetadata, now: int) -> bool:
    """Whether an output of ``md`` alone, published from now on, finishes later than ``md`` did."""
    return now >= md.event_timestamp_ms + LONE_MARGIN_MS


class LoneSegments:
    """The job's memory of lone segments whose compaction could not replace them."""

    def __init__(self) -> None:
        self._kept: dict[TopicIdPartition, RemoteLogSegmentId] = {}

    def skip(self, tp: TopicIdPartition, inputs: tuple[RemoteLogSegmentMetadata, ...]) -> bool:
        """A plan of one segment already compacted without a publishable result: not again."""
        return len(inputs) == 1 and self._kept.get(tp) == inputs[0].remote_log_segment_id

    def publishes(self, tp: TopicIdPartition, md: RemoteLogSegmentMetadata, result: CompactionResult,
                  now: int) -> bool:
        """Whether the compaction ``result`` of ``md`` alone may replace it (module docstring)."""
        size = result.bytes_out
        if not lone_ready(md, now):
            why = "the lone segment finished less than LONE_MARGIN_MS ago (by this node's clock)"
        elif size == md.segment_size_in_bytes:
            why = ("compacting the lone segment removed nothing" if result.records_kept == result.records_read
                   and not (result.batches_reframed or result.batches_emptied or result.batches_removed)
                   else "the output would be as large as the lone segment: an exact duplicate to readers")
            self._kept[tp] = md.remote_log_segment_id
        else:
            self._kept.pop(tp, None)
            return True
        log.info("remote_compaction_waits", topic=tp.topic, partition=tp.partition,
                 segment_id=md.remote_log_segment_id.id.text, reason=why)
        return False
