"""The read side's HTTP API (Starlette): catalog, segment plans, records, offsets, metrics.

Every answer comes from :class:`~fetcher.core.RemoteFetcher`; this module only parses, calls
and encodes. Blocking core calls run off the event loop: reads through the core's reader pool
(so a full pool is a 429 and a slow read a 504), catalog lookups in a worker thread. A streamed
body starts only after its first piece was read, so errors before it become proper statuses;
an error later aborts the stream (the client sees a cut-off body, never silently fewer records).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fetcher import KAFKA_SCHEMA
from fetcher.cluster_auth import LoginLimiter
from fetcher.core import OffsetAnswer, RemoteFetcher
from fetcher.fetch import IsolationLevel
from fetcher.http import encoders, params
from fetcher.http.auth import BearerAuth
from fetcher.http.errors import ApiError, BadParameter, CatchAll, handle_exception, handle_http_exception
from fetcher.http.metrics import CONTENT_TYPE, ApiMetrics, Timing
from fetcher.http.openapi import openapi_document
from fetcher.planning import PartitionPlan
from rlm.errors import OffsetOutOfRangeError, RlmError

T = TypeVar("T")

# A scan's first step also plans, loads indexes and decodes a whole window (and compiles the
# decoder on first use), so it gets more than a 1 MB fetch's remote.fetch.max.wait.ms.
SCAN_START_TIMEOUT_MS = 30_000
# Worker threads beyond the reader pool's threads + queue: requests past a full pool get a 429.
EXTRA_THREADS = 16


#: ``/``: what a browser pointed at ``rlm serve`` finds (the API itself is described by /openapi.json)
INDEX_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>rlm read API</title></head>
<body><h1>rlm read API</h1>
<p>Tiered Kafka data, read from remote storage.</p>
<ul>
<li><a href="/openapi.json">/openapi.json</a>: the API (OpenAPI 3)</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/health">/health</a>: health</li>
<li><a href="/v1/topics">/v1/topics</a>: the tiered topics</li>
</ul></body></html>
"""


async def index(request: Request) -> Response:
    """``/``: a small HTML index of the API's entry points (it used to answer 404)."""
    return HTMLResponse(INDEX_HTML)


def create_app(fetcher: RemoteFetcher, *, token: str | None = None,
               login_limits: LoginLimiter | None = None) -> Starlette:
    """The ASGI application over ``fetcher`` (which the caller owns and closes); ``login_limits``
    counts wrong tokens per client address (default: ``read.http_security``'s limits)."""
    api = _Api(fetcher)
    routes = [
        Route("/v1/topics", api.topics),
        Route("/v1/topics/{topic}/partitions/{partition}/segments", api.segments),
        Route("/v1/topics/{topic}/partitions/{partition}/records", api.records),
        Route("/v1/topics/{topic}/offsets", api.offsets),
        Route("/metrics", api.metrics),
        Route("/health", api.health),
        Route("/openapi.json", api.openapi),
        Route("/", index),
    ]
    middleware = [Middleware(CatchAll), Middleware(Timing, metrics=api.stats, routes=routes)]
    if token is not None:
        limits = login_limits or LoginLimiter.from_security(fetcher.read_config.http_security)
        middleware.append(Middleware(BearerAuth, token=token, limits=limits))
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={HTTPException: handle_http_exception, RlmError: handle_exception,
                                         ApiError: handle_exception})


class _Api:
    def __init__(self, fetcher: RemoteFetcher) -> None:
        self.fetcher = fetcher
        self.stats = ApiMetrics(fetcher)
        self._limiter = CapacityLimiter(fetcher.read_capacity + EXTRA_THREADS)

    async def _pooled(self, fn: Callable[[], T], what: str, timeout_ms: int | None = None) -> T:
        """Run ``fn`` on the reader pool (429 when full, 504 after ``timeout_ms``, by default
        ``remote.fetch.max.wait.ms``), waiting in a worker thread so the event loop stays free."""
        return await self._thread(self.fetcher.run_bounded, fn, timeout_ms, what)

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking core call on a worker thread. The threads are limited above the reader
        pool's capacity, so a burst reaches the pool and is refused there (429) instead of
        queueing without bound in front of it."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # ---- catalog ---------------------------------------------------------------------------
    async def topics(self, request: Request) -> Response:
        found = await self._thread(self.fetcher.topics)
        return JSONResponse({"topics": [
            {"topic": name, "topic_id": str(tps[0].topic_id), "partitions": [tp.partition for tp in tps]}
            for name, tps in found.items()]})

    async def segments(self, request: Request) -> Response:
        topic, part = request.path_params["topic"], params.partition(request)
        plan = await self._thread(self.fetcher.plan, topic, part)
        return JSONResponse(_plan_json(plan))

    async def offsets(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        text = request.query_params.get("timestamp")
        if text is None:
            raise BadParameter("timestamp", "is required (epoch ms, ISO-8601, earliest or latest)")
        ts = params.timestamp("timestamp", text)
        tps = await self._thread(self.fetcher.topics)
        if topic not in tps:
            await self._thread(self.fetcher.partition, topic, 0)  # raises the 404 error
        out = []
        for tp in tps[topic]:
            ans: OffsetAnswer | None = await self._thread(
                self.fetcher.offset_for_timestamp, topic, tp.partition, ts)
            row: dict[str, Any] = {"partition": tp.partition, "offset": None, "timestamp": None,
                                   "leader_epoch": None, "source": None}
            if ans is not None:
                row.update(ans.to_dict())
            out.append(row)
        return JSONResponse({"topic": topic, "timestamp": ts, "partitions": out})

    # ---- records ---------------------------------------------------------------------------
    async def records(self, request: Request) -> Response:
        topic, part = request.path_params["topic"], params.partition(request)
        q = request.query_params
        kind = params.media_type(request)
        level = params.isolation(request)
        max_bytes = params.integer("max_bytes", q.get("max_bytes"), lo=1, hi=params.MAX_FETCH_BYTES,
                                   default=params.DEFAULT_FETCH_BYTES)
        if "offset" in q and "timestamp" in q:
            raise BadParameter("timestamp", "give offset or timestamp, not both")
        if "timestamp" in q:
            offset = await self._offset_at(topic, part, params.timestamp("timestamp", q["timestamp"]))
        elif "offset" in q:
            offset = params.integer("offset", q["offset"])
        else:  # from the remote log start
            offset = (await self._thread(self.fetcher.plan, topic, part)).log_start
        if kind == encoders.ARROW:
            return await self._arrow(topic, part, offset, level, max_bytes)
        committed = level is IsolationLevel.READ_COMMITTED
        result = await self._thread(
            lambda: self.fetcher.fetch(topic, part, offset, max_bytes=max_bytes, isolation=level,
                                       drop_aborted=committed))
        headers = {"X-Next-Offset": str(result.next_offset), "X-Log-Start-Offset": str(result.log_start),
                   "X-Log-End-Offset": str(result.log_end)}
        if result.segment_id is not None:
            headers["X-Remote-Segment-Id"] = result.segment_id
        if committed and result.last_stable_offset is not None:
            headers["X-Last-Stable-Offset"] = str(result.last_stable_offset)
            if result.stable_limited:
                headers["X-Last-Stable-Offset-Source"] = "remote"
        body = (encoders.raw_pieces(result) if kind == encoders.RAW
                else encoders.ndjson_pieces(result, offset))
        return StreamingResponse(body, media_type=kind, headers=headers)

    async def _offset_at(self, topic: str, part: int, ts: int) -> int:
        ans = await self._thread(self.fetcher.offset_for_timestamp, topic, part, ts)
        if ans is not None:
            return ans.offset
        plan = await self._thread(self.fetcher.plan, topic, part)
        raise OffsetOutOfRangeError(
            f"{plan.tp}: no remote record has a timestamp at or after {ts} (remote range "
            f"[{plan.log_start}, {plan.log_end}))", log_start=plan.log_start, log_end=plan.log_end)

    async def _arrow(self, topic: str, part: int, offset: int, level: IsolationLevel,
                     max_bytes: int) -> Response:
        plan = await self._thread(self.fetcher.plan, topic, part)
        plan.index_of(offset)  # out of range -> 416, as for fetch
        rows = max(64, min(65536, max_bytes // 256))
        scan = self.fetcher.scan(topic, part, start_offset=offset, isolation=level, max_batch_rows=rows)
        wait_ms = max(self.fetcher.read_config.fetch_max_wait_ms, SCAN_START_TIMEOUT_MS)
        first = await self._pooled(lambda: next(scan, None), f"scan {topic}-{part}@{offset}", wait_ms)
        batches = itertools.chain([first] if first is not None else [], scan)
        schema = first.schema if first is not None else KAFKA_SCHEMA
        headers = {"X-Log-Start-Offset": str(plan.log_start), "X-Log-End-Offset": str(plan.log_end)}
        if level is IsolationLevel.READ_COMMITTED:
            bound = await self._thread(self.fetcher.committed_bound, topic, part)
            headers["X-Last-Stable-Offset"] = str(bound.stable_offset)
            if bound.limited:
                headers["X-Last-Stable-Offset-Source"] = "remote"
        return StreamingResponse(encoders.arrow_pieces(schema, batches, max_bytes), media_type=encoders.ARROW,
                                 headers=headers)

    # ---- operations ------------------------------------------------------------------------
    async def metrics(self, request: Request) -> Response:
        return Response(self.stats.render(), media_type=CONTENT_TYPE)

    async def health(self, request: Request) -> Response:
        found = await self._thread(self.fetcher.topics)
        return JSONResponse({"status": "ok", "topics": len(found)})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())


def _plan_json(plan: PartitionPlan) -> dict[str, Any]:
    return {
        "topic": plan.tp.topic, "partition": plan.tp.partition, "topic_id": str(plan.tp.topic_id),
        "log_start_offset": plan.log_start, "log_end_offset": plan.log_end,
        "lineage": [{"leader_epoch": e, "start_offset": s} for e, s in plan.lineage],
        "gaps": [{"first_offset": a, "last_offset": b} for a, b in plan.gaps],
        "segments": [{
            "segment_id": str(link.metadata.remote_log_segment_id.id),
            "first_offset": link.first, "last_offset": link.last,
            "start_offset": link.metadata.start_offset, "end_offset": link.metadata.end_offset,
            "size_bytes": link.metadata.segment_size_in_bytes,
            "max_timestamp_ms": link.metadata.max_timestamp_ms,
            "leader_epochs": [{"leader_epoch": e, "start_offset": s}
                              for e, s in link.metadata.segment_leader_epochs],
            "truncated": link.truncated,
        } for link in plan.segments],
    }

