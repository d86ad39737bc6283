"""Read-side errors as HTTP answers: one JSON body shape, one status per error kind.

The typed errors of :mod:`rlm.errors` decide the status, never their messages: 400 names the
bad parameter, 404 an unknown topic or partition, 416 carries the remote range, 429 and 503 say
when to retry (``Retry-After``), 504 is a read that ran out of time. Anything unexpected is a
JSON 500 without internals (logged with its traceback on the server), never a traceback page.
"""

from __future__ import annotations

from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlm.errors import (
    FetchTimeoutError,
    LogFormatError,
    OffsetOutOfRangeError,
    ReaderBusyError,
    RemoteLogMetadataError,
    RemoteReadError,
    RemoteStorageError,
    RlmError,
    UnknownTopicOrPartitionError,
)

log = structlog.get_logger(__name__)

RETRY_AFTER_BUSY_S = 1
RETRY_AFTER_UNAVAILABLE_S = 2


class ApiError(Exception):
    """An answer decided by the API itself (bad parameter, not acceptable ...)."""

    def __init__(self, status: int, error: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.fields = fields


class BadParameter(ApiError):
    """400 naming the offending query or path parameter."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(400, "bad_parameter", f"{parameter}: {message}", parameter=parameter)


def error_body(status: int, error: str, message: str, **fields: Any) -> JSONResponse:
    headers = {}
    if status == 429:
        headers["Retry-After"] = str(RETRY_AFTER_BUSY_S)
    elif status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE_S)
    return JSONResponse({"error": error, "message": message, **fields}, status_code=status, headers=headers)


def classify(exc: BaseException) -> tuple[int, str, dict[str, Any]]:
    """(status, error code, extra body fields) of a read-side error; 500 for the unexpected."""
    if isinstance(exc, ApiError):
        return exc.status, exc.error, exc.fields
    if isinstance(exc, UnknownTopicOrPartitionError):
        return 404, "unknown_topic_or_partition", {}
    if isinstance(exc, OffsetOutOfRangeError):
        return 416, "offset_out_of_range", {"log_start_offset": exc.log_start, "log_end_offset": exc.log_end}
    if isinstance(exc, ReaderBusyError):
        return 429, "reader_busy", {}
    if isinstance(exc, FetchTimeoutError):
        return 504, "fetch_timeout", {}
    if isinstance(exc, RemoteStorageError):
        return (503, "storage_unavailable", {}) if exc.retriable else (502, "remote_storage_error", {})
    if isinstance(exc, RemoteLogMetadataError) and exc.retriable:
        return 503, "metadata_unavailable", {}
    if isinstance(exc, LogFormatError):
        return 502, "corrupt_remote_data", {}
    if isinstance(exc, RemoteReadError) and exc.retriable:
        return 503, "remote_read_unavailable", {}
    if isinstance(exc, RlmError) and exc.retriable:
        return 503, "unavailable", {}
    return 500, "internal_error", {}


def response_for(exc: BaseException, request: Request | None = None) -> JSONResponse:
    """The JSON answer for ``exc``; a 500 is logged with its traceback and says nothing more."""
    status, error, fields = classify(exc)
    path = request.url.path if request is not None else None
    if status == 500:
        log.error("http_request_failed", path=path, kind=type(exc).__name__, exc_info=exc)
        return error_body(500, error, "internal error (logged by the server)")
    if status >= 502:
        log.warning("http_request_unavailable", path=path, status=status, kind=type(exc).__name__,
                    error=str(exc))
    message = exc.message if isinstance(exc, ApiError) else str(exc)
    return error_body(status, error, message, **fields)


class CatchAll:
    """Outermost ASGI middleware: an exception no handler took becomes the JSON 500 here, so the
    server never sees it (no traceback page, and the connection stays usable). Once a body has
    started streaming, the exception is re-raised: the server then aborts the connection, which is
    the only honest way to tell the client its body is incomplete."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            if started:
                log.warning("http_stream_aborted", path=scope.get("path"), kind=type(exc).__name__,
                            error=str(exc) if isinstance(exc, RlmError) else None)
                raise
            await response_for(exc, Request(scope))(scope, receive, send)


async def handle_exception(request: Request, exc: Exception) -> Response:
    return response_for(exc, request)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (unknown route, wrong method) as JSON bodies too."""
    assert isinstance(exc, HTTPException)
    names = {404: "not_found", 405: "method_not_allowed"}
    resp = error_body(exc.status_code, names.get(exc.status_code, "http_error"), str(exc.detail))
    if exc.headers:
        resp.headers.update(exc.headers)
    return resp
