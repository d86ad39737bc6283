"""Kafka's isolation levels, apart from :mod:`fetcher.fetch` so light modules can name them.

The Spark source's option parsing and schema run in short-lived Python workers that must not
import the read core (numba kernels, pyarrow readers): they take the enum from here.
"""

from __future__ import annotations

import enum

__all__ = ["IsolationLevel"]


class IsolationLevel(enum.IntEnum):
    """Kafka's isolation levels (the numbers are the Fetch request's)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def parse(cls, value: str | int | IsolationLevel) -> IsolationLevel:
        if isinstance(value, IsolationLevel):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.strip().upper()]
        except KeyError:
            raise ValueError(f"isolation must be read_uncommitted or read_committed, not {value!r}") from None
