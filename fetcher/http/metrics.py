"""Prometheus metrics of the HTTP API and of the read core behind it.

The core keeps plain counters (``ReadStats``, the index cache, the reader pool); a collector
reads them at scrape time, so the core does not depend on prometheus. Request latency is a
histogram per route template, method and status, measured until the last body byte is sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fetcher.core import RemoteFetcher

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _FetcherCollector(Collector):
    def __init__(self, fetcher: RemoteFetcher) -> None:
        self.fetcher = fetcher

    def collect(self) -> Iterator[Metric]:
        s = self.fetcher.counters()
        counters = (
            ("rlm_fetch_remote_get_requests", "Ranged GETs of remote segment data", s["get_requests"]),
            ("rlm_fetch_remote_get_bytes", "Bytes of remote segment data read", s["get_bytes"]),
            ("rlm_fetch_chunk_cache_hits", "Reads served from the chunk cache", s["chunk_hits"]),
            ("rlm_fetch_chunk_cache_misses", "Chunks fetched from remote storage", s["chunk_misses"]),
            ("rlm_fetch_index_fetches", "Remote index files fetched", s["index_fetches"]),
            ("rlm_fetch_index_fetch_bytes", "Bytes of remote index files fetched", s["index_bytes"]),
            ("rlm_fetch_index_cache_hits", "Remote index cache hits", s["index_cache_hits"]),
            ("rlm_fetch_index_cache_misses", "Remote index cache misses", s["index_cache_misses"]),
            ("rlm_fetch_reader_pool_rejected", "Reads refused because the reader pool was full",
             s["pool_rejected"]),
            ("rlm_fetch_reader_pool_timeouts", "Reads that did not finish in time", s["pool_timeouts"]),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily("rlm_fetch_reader_pool_in_use", "Running plus queued remote reads",
                                value=s["pool_in_use"])
        yield GaugeMetricFamily("rlm_fetch_reader_pool_capacity", "Reader threads plus queue slots",
                                value=s["pool_capacity"])
        yield GaugeMetricFamily("rlm_fetch_index_cache_bytes", "Bytes of the on-disk remote index cache",
                                value=s["index_cache_bytes"])


class ApiMetrics:
    """A registry of its own (several servers can live in one process, e.g. in tests)."""

    def __init__(self, fetcher: RemoteFetcher) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_FetcherCollector(fetcher))
        self.latency = Histogram(
            "rlm_http_request_duration_seconds", "HTTP API requests, until the last body byte",
            ("route", "method", "status"), registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Timing:
    """ASGI middleware observing each request's duration under its route template."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics, routes: list[Route]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.latency.labels(self._route(scope), scope.get("method", ""), str(status[0])).observe(
                time.perf_counter() - started)

    def _route(self, scope: Scope) -> str:
        for r in self.routes:
            if r.matches(scope)[0] is Match.FULL:
                return r.path
        return "unmatched"
