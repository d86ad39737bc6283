"""The daemon's wall clock, with a test seam for clock jumps.

Wall time is used only where a time is *recorded* or compared with recorded times: event
timestamps in metadata records, ``retention.ms`` against a segment's max timestamp, and the
status file. Everything that schedules or times out uses ``time.monotonic()`` instead, so a jump
of the wall clock (NTP step, a VM resumed, an operator's ``date -s``) can neither stall nor
rush the scheduler, nor make an in-progress copy look abandoned (see ``expiry.StaleCopyWatch``).

Test seam: ``RLM_TEST_CLOCK_OFFSET_MS`` shifts the wall clock of a daemon started as a
subprocess; ``RLM_TEST_CLOCK_OFFSET_FILE`` names a file holding an offset in milliseconds that
is re-read on every call, so a test can jump the clock of a running daemon forwards and back.
In-process tests call :func:`set_offset_ms`. Unset = the real clock, at no cost.
"""

from __future__ import annotations

import os
import time


def _env_offset() -> int:
    """The subprocess seam's offset; a value that is not an integer is ignored (real clock)."""
    try:
        return int(os.environ.get("RLM_TEST_CLOCK_OFFSET_MS", "0") or 0)
    except ValueError:
        return 0


_offset_ms = _env_offset()
_offset_file = os.environ.get("RLM_TEST_CLOCK_OFFSET_FILE") or None


def set_offset_ms(offset: int) -> None:
    """Shift this process's wall clock by ``offset`` ms (tests only)."""
    global _offset_ms
    _offset_ms = offset


def _file_offset() -> int:
    if _offset_file is None:
        return 0
    try:
        with open(_offset_file, encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def wall_ms() -> int:
    """Milliseconds since the epoch, as the (possibly shifted) wall clock says."""
    return int(time.time() * 1000) + _offset_ms + _file_offset()
