"""Test hook: ``RLM_TEST_CRASH_AT=<step>`` makes the process SIGKILL itself at that protocol step.

Copy steps: ``after_copy_started`` (metadata says STARTED, nothing uploaded), ``after_rsm_copy``
(data uploaded, not FINISHED), ``after_copy_finished`` (FINISHED recorded). Delete steps (every
remote delete: retention, off-lineage, undoing a copy): ``after_delete_started`` (metadata says
DELETE_SEGMENT_STARTED, data still there), ``after_rsm_delete`` (data gone, not FINISHED),
``after_delete_finished`` (DELETE_SEGMENT_FINISHED recorded). Crash tests run the daemon as a
subprocess with this variable and check that a restart converges. Unset = no effect.
"""

from __future__ import annotations

import os
import signal

COPY_STEPS = ("after_copy_started", "after_rsm_copy", "after_copy_finished")
DELETE_STEPS = ("after_delete_started", "after_rsm_delete", "after_delete_finished")
#: ``rlm metadata rebuild``: after a segment's STARTED record, after its FINISHED record.
REBUILD_STEPS = ("rebuild_after_started", "rebuild_after_finished")
#: ``rlm restore``: after a segment's ``.log`` was renamed into the partition directory.
RESTORE_STEPS = ("restore_after_segment",)
#: ``rlm restore --adopt-into``: after an adopted segment's STARTED record (FINISHED not yet).
ADOPT_STEPS = ("adopt_after_started",)
#: remote compaction's replacement (rlm/daemon/remote_compaction.py), besides the copy and delete
#: steps inside it: output written (nothing published), new FINISHED, first input deleted.
REPLACE_STEPS = (
    "compaction_after_compact",
    "compaction_after_new_finished",
    "compaction_after_first_old_deleted",
)
STEPS = COPY_STEPS  # the copy steps, under the name tests/daemon/test_crash.py uses
ALL_STEPS = COPY_STEPS + DELETE_STEPS


def crash_point(step: str) -> None:
    """SIGKILL this process if ``RLM_TEST_CRASH_AT`` names ``step`` (no cleanup, no flushing)."""
    if os.environ.get("RLM_TEST_CRASH_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)
