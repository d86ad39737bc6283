"""Translate botocore errors into the project's typed storage errors, and retry what is retriable.

botocore already retries API calls on throttling, 5xx and connection errors (``retries`` config);
what it cannot retry is a failure *while reading a response body*, so ranged chunk downloads go
through :func:`with_retries` as well.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import structlog
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ResponseStreamingError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from rlm.errors import RemoteRangeError, RemoteResourceNotFoundError, RemoteStorageError

log = structlog.get_logger(__name__)

T = TypeVar("T")

NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "PriorRequestNotComplete",
        "OperationAborted",
        "PreconditionFailed",  # the object changed between the ranged GETs of one read; read it again
    }
)


def client_error_code(e: ClientError) -> tuple[str, int]:
    err = e.response.get("Error", {}) or {}
    meta = e.response.get("ResponseMetadata", {}) or {}
    return str(err.get("Code", "")), int(meta.get("HTTPStatusCode", 0) or 0)


def map_error(e: BaseException, bucket: str, key: str | None, action: str) -> RemoteStorageError:
    """The typed error for ``e``, raised by ``action`` on ``s3://bucket/key``."""
    where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    if isinstance(e, RemoteStorageError):
        return e
    if isinstance(e, ClientError):
        code, status = client_error_code(e)
        msg = (e.response.get("Error", {}) or {}).get("Message", "") or code
        if code == "NoSuchBucket":
            return RemoteStorageError(
                f"{action} {where}: bucket {bucket!r} does not exist ({msg})", retriable=False
            )
        if code in NOT_FOUND_CODES or (status == 404 and code not in ("NoSuchBucket",)):
            return RemoteResourceNotFoundError(f"{action} {where}: not found ({code or status})")
        if code == "InvalidRange" or status == 416:
            return RemoteRangeError(f"{action} {where}: range not satisfiable ({msg})")
        retriable = code in RETRIABLE_CODES or status >= 500 or status in (408, 429)
        return RemoteStorageError(f"{action} {where}: {code or status}: {msg}", retriable=retriable)
    if isinstance(e, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return RemoteStorageError(
            f"{action} {where}: no usable AWS credentials ({type(e).__name__}); set access_key_id and "
            f"secret_access_key in the plugin config or configure the default credential chain",
            retriable=False,
        )
    if isinstance(e, BotoConnectionError | HTTPClientError | ResponseStreamingError | OSError):
        return RemoteStorageError(f"{action} {where}: {type(e).__name__}: {e}", retriable=True)
    if isinstance(e, BotoCoreError):
        return RemoteStorageError(f"{action} {where}: {type(e).__name__}: {e}", retriable=False)
    return RemoteStorageError(f"{action} {where}: {type(e).__name__}: {e}", retriable=False)


def with_retries(
    fn: Callable[[], T],
    *,
    bucket: str,
    key: str,
    action: str,
    attempts: int,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
) -> T:
    """Run ``fn``; on a retriable error try again with jittered exponential backoff."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:
            err = map_error(e, bucket, key, action)
            if not err.retriable or attempt == attempts:
                raise err from e
            delay = min(max_delay, base_delay * 2 ** (attempt - 1)) * (0.5 + random.random())
            log.warning(
                "s3_retry",
                action=action,
                bucket=bucket,
                key=key,
                attempt=attempt,
                error=str(err),
                delay_s=round(delay, 3),
            )
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
