"""Query and path parameters of the HTTP API, parsed strictly: a bad one is a 400 naming it."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request

from fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from fetcher.fetch import IsolationLevel
from fetcher.http.encoders import MEDIA_TYPES, NDJSON
from fetcher.http.errors import ApiError, BadParameter

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_FETCH_BYTES = 64 * 1024 * 1024
DEFAULT_FETCH_BYTES = 1024 * 1024


def integer(name: str, text: str | None, *, lo: int = 0, hi: int = INT64_MAX,
            default: int | None = None) -> int:
    if text is None:
        if default is None:
            raise BadParameter(name, "is required")
        return default
    t = text.strip()
    if not t.isascii() or not t.lstrip("-").isdigit() or len(t) > 20:
        raise BadParameter(name, f"must be an integer, not {text[:40]!r}")
    value = int(t)
    if not lo <= value <= hi:
        raise BadParameter(name, f"must be between {lo} and {hi}, not {value}")
    return value


def partition(request: Request) -> int:
    return integer("partition", request.path_params["partition"], hi=INT32_MAX)


def timestamp(name: str, text: str) -> int:
    """Epoch milliseconds, ``earliest`` (-2), ``latest`` (-1) or ISO-8601 (UTC when no zone)."""
    t = text.strip()
    if t.lower() == "earliest":
        return EARLIEST_TIMESTAMP
    if t.lower() == "latest":
        return LATEST_TIMESTAMP
    if t.isascii() and t.isdigit():
        return integer(name, t)
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise BadParameter(name, "must be epoch milliseconds, ISO-8601, 'earliest' or 'latest', "
                                 f"not {text[:40]!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ms = int(dt.timestamp() * 1000)
    if ms < 0:
        raise BadParameter(name, f"must not be before 1970, not {text[:40]!r}")
    return ms


def isolation(request: Request) -> IsolationLevel:
    text = request.query_params.get("isolation", "read_uncommitted")
    try:
        return IsolationLevel.parse(text)
    except ValueError:
        raise BadParameter(
            "isolation", f"must be read_uncommitted or read_committed, not {text[:40]!r}") from None


def media_type(request: Request) -> str:
    """Content negotiation over :data:`MEDIA_TYPES` (NDJSON for ``*/*`` or no Accept); 406 otherwise."""
    accept = request.headers.get("accept", "").strip()
    if not accept:
        return NDJSON
    best: tuple[float, int, str] | None = None
    for rank, item in enumerate(accept.split(",")):
        kind, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for p in params:
            if p.startswith("q="):
                try:
                    q = float(p[2:])
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        kind = kind.lower()
        candidates = [m for m in MEDIA_TYPES if kind in (m, "*/*", m.split("/")[0] + "/*")]
        for m in candidates[:1]:
            key = (-q, rank, m)
            if best is None or key < best:
                best = key
    if best is None:
        raise ApiError(406, "not_acceptable", f"Accept must allow one of {', '.join(MEDIA_TYPES)}",
                       available=list(MEDIA_TYPES))
    return best[2]
