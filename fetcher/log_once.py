"""Once-per-window logging of repeated events (authorization denials) for both read faces.

Why: a client retrying a refused request in a loop repeats the same denial; one line per window
says all there is, and the log cannot be flooded by an attacker. One function, so the HTTP API
and the Kafka endpoint keep the same rule.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TypeVar

#: remembered keys at most; beyond it the table starts afresh (a few repeated lines, bounded memory)
MAX_KEYS = 10_000

K = TypeVar("K", bound=Hashable)


def first_in_window(seen: dict[K, float], key: K, every_s: float = 60.0) -> bool:
    """Whether ``key`` was not seen in the last ``every_s`` seconds (then it is recorded as seen
    now). ``seen`` is the caller's table, one per logger of such events."""
    now = time.monotonic()
    last = seen.get(key)
    if last is not None and now - last < every_s:
        return False
    if len(seen) >= MAX_KEYS:
        seen.clear()
    seen[key] = now
    return True
