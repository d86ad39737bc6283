"""The HTTP face of the read core: Starlette routes over the read core, served by uvicorn.

``rlm serve``, or ``rlm run`` with ``read.serve_http``; the routes call
:class:`~fetcher.core.RemoteFetcher`.

Modules: :mod:`~fetcher.http.app` (routes), :mod:`~fetcher.http.params` (strict parameters),
:mod:`~fetcher.http.errors` (error -> status), :mod:`~fetcher.http.encoders` (raw/NDJSON/Arrow
bodies), :mod:`~fetcher.http.auth` (bearer token), :mod:`~fetcher.http.metrics` (Prometheus),
:mod:`~fetcher.http.openapi` (the document), :mod:`~fetcher.http.server` (uvicorn).
Needs the ``http`` extra (starlette, uvicorn).
"""

from fetcher.http.app import create_app
from fetcher.http.server import HttpApiServer

__all__ = ["HttpApiServer", "create_app"]
