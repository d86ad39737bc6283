"""Who sent the request a handler answers: its connection and, with SASL, its principal and
what that principal may read.

Handlers keep the one signature ``(ctx, req, version, header)``; what they must know about the
requester travels in context variables: the listener sets :data:`CONNECTION` for every request,
the connection's guard sets :data:`FETCH_ACCESS` around a Fetch. Every request runs in its own
asyncio task with its own copy of the context, so a value set for one request is never seen by
another connection's requests.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

#: the listener's connection object the current request came in on (compared by identity);
#: None outside the listener (handlers called directly)
CONNECTION: ContextVar[object | None] = ContextVar("kafka_connection", default=None)


@dataclass(frozen=True, slots=True)
class FetchAccess:
    """The guard's decisions for one Fetch, from the same per-principal ACL cache as every other
    API: a session's partitions are checked on each request, not only those the request names."""

    principal: str
    #: whether the principal may READ the topic (by name)
    readable: Callable[[str], bool]
    #: log a refusal once: (reason, topic names)
    denied: Callable[[str, list[str]], None]


#: set by the connection's guard while its Fetch handler runs; None: no authorization (no SASL)
FETCH_ACCESS: ContextVar[FetchAccess | None] = ContextVar("kafka_fetch_access", default=None)
