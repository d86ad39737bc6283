"""Test hook: ``RLM_TEST_CRASH_AT=<step>`` makes the process SIGKILL itself at that copy-protocol step.

Steps: ``after_copy_started`` (metadata says STARTED, nothing uploaded), ``after_rsm_copy`` (data
uploaded, not FINISHED), ``after_copy_finished`` (FINISHED recorded). Crash tests run the daemon
as a subprocess with this variable and check that a restart converges. Unset = no effect.
"""

from __future__ import annotations

import os
import signal

STEPS = ("after_copy_started", "after_rsm_copy", "after_copy_finished")


def crash_point(step: str) -> None:
    """SIGKILL this process if ``RLM_TEST_CRASH_AT`` names ``step`` (no cleanup, no flushing)."""
    if os.environ.get("RLM_TEST_CRASH_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)
