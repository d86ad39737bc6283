"""KIP-848 subscription regexes, with RE2 semantics as Kafka's group coordinator has them.

Why RE2: Kafka compiles ``SubscribedTopicRegex`` with RE2/J (``com.google.re2j.Pattern``), whose
matching time is linear in the topic name, so no pattern can make the coordinator backtrack for
seconds (Python's ``re`` took 11.7 s on ``(.*.*.*.*.*.*.*.*.*)*X``, on the event loop). The
``google-re2`` bindings are the same engine as RE2/J and accept the same syntax: no
backreferences, no lookaround; a pattern must match the whole topic name (``matcher().matches()``).

Kafka's rules, followed here: a regex that does not compile is INVALID_REGULAR_EXPRESSION with
``SubscribedTopicRegex `...` is not a valid regular expression: ...`` (Utils.
throwIfRegularExpressionIsInvalid); a regex is resolved against every topic name of the metadata
image and the result kept per (regex, image version), so heartbeats do not re-run it; what a
member gets of the result is filtered by DESCRIBE for its principal (done by the coordinator).
RE2's memory cap (``max_mem``, 8 MiB) bounds what one pattern may cost; a bigger one does not
compile and is refused the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error goes back to the client; absl's stderr line says nothing more

#: resolved (regex, catalog version) pairs kept: a group has few regexes, so this is many groups'
_MAX_ENTRIES = 1024


class InvalidRegex(ValueError):
    """A subscription regex RE2 does not compile; the message is Kafka's."""


def compile_regex(regex: str) -> Any:
    """The compiled pattern, or :class:`InvalidRegex` with Kafka's message."""
    try:
        return re2.compile(regex, options=_OPTIONS)
    except re2.error as e:
        detail = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InvalidRegex(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}.") from None


class RegexResolver:
    """The topic names each regex matches, per catalog version; thread-safe.

    :meth:`resolve` runs the match (on an executor: it is linear, but over every topic); the
    event loop then reads the result with :meth:`cached`. Compile errors are kept too, so a client
    repeating a bad regex costs one dict lookup. Least recently used entries go first.
    """

    def __init__(self, max_entries: int = _MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, Hashable], frozenset[str] | InvalidRegex] = OrderedDict()
        self.resolutions = 0  # how many times a regex was run over the catalog (tests, metrics)

    def cached(self, regex: str, version: Hashable) -> frozenset[str] | InvalidRegex | None:
        """The matches (or the compile error) of ``regex`` for ``version``; None: not resolved yet."""
        key = (regex, version)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def resolve(self, regex: str, names: Iterable[str], version: Hashable) -> frozenset[str] | InvalidRegex:
        """Match ``regex`` against ``names`` (blocking) and keep the answer for ``version``."""
        hit = self.cached(regex, version)
        if hit is not None:
            return hit
        result: frozenset[str] | InvalidRegex
        try:
            pattern = compile_regex(regex)
        except InvalidRegex as e:
            result = e
        else:
            result = frozenset(n for n in names if pattern.fullmatch(n) is not None)
        with self._lock:
            self.resolutions += 1
            self._entries[(regex, version)] = result
            self._entries.move_to_end((regex, version))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return result
