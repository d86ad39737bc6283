"""The OpenAPI 3.0 document of the HTTP API (served at ``/openapi.json``).

Written by hand next to the routes rather than inferred from them, so the parameter ranges and
every error status are stated exactly; the schemathesis tests hold the server to it.
"""

from __future__ import annotations

from typing import Any

from fetcher.http.encoders import ARROW, NDJSON, RAW
from fetcher.http.params import DEFAULT_FETCH_BYTES, INT32_MAX, MAX_FETCH_BYTES

_INT64 = {"type": "integer", "format": "int64"}
_NULL_INT = {"type": "integer", "format": "int64", "nullable": True}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(description: str, retry_after: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description,
                           "content": {"application/json": {"schema": _ref("Error")}}}
    if retry_after:
        out["headers"] = {"Retry-After": {"description": "Seconds to wait before retrying",
                                          "schema": {"type": "integer"}}}
    return out


_COMMON_ERRORS = {
    "401": _error("Missing or wrong bearer token (when the server requires one)"),
    "500": _error("Unexpected error (details only in the server log)"),
}
_READ_ERRORS = {
    **_COMMON_ERRORS,
    "400": _error("A parameter is invalid; `parameter` names it"),
    "404": _error("Unknown topic or partition (no remote data)"),
    "429": _error("The remote reader pool is full", retry_after=True),
    "502": _error("Remote storage returned corrupt or incomplete data"),
    "503": _error("Remote storage or metadata is unavailable", retry_after=True),
    "504": _error("The remote read did not finish within remote.fetch.max.wait.ms"),
}

_TOPIC: dict[str, Any] = {"name": "topic", "in": "path", "required": True,
                          "schema": {"type": "string", "minLength": 1}}
_PARTITION: dict[str, Any] = {"name": "partition", "in": "path", "required": True,
              "schema": {"type": "integer", "minimum": 0, "maximum": INT32_MAX}}
_TIMESTAMP_DOC = "Epoch milliseconds, ISO-8601 (UTC when no zone), `earliest` or `latest`"
_TIMESTAMP = {"type": "string", "pattern": (
    r"^(earliest|latest|[0-9]{1,15}|(19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    r"(T([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?)$")}

_SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error", "message"], "properties": {
        "error": {"type": "string"}, "message": {"type": "string"},
        "parameter": {"type": "string"}, "log_start_offset": _INT64, "log_end_offset": _INT64}},
    "Topics": {"type": "object", "required": ["topics"], "properties": {"topics": {"type": "array", "items": {
        "type": "object", "required": ["topic", "topic_id", "partitions"], "properties": {
            "topic": {"type": "string"}, "topic_id": {"type": "string"},
            "partitions": {"type": "array", "items": {"type": "integer"}}}}}}},
    "EpochStart": {"type": "object", "properties": {"leader_epoch": {"type": "integer"},
                                                     "start_offset": _INT64}},
    "Plan": {"type": "object", "required": ["topic", "partition", "log_start_offset", "log_end_offset",
                                            "lineage", "gaps", "segments"], "properties": {
        "topic": {"type": "string"}, "partition": {"type": "integer"}, "topic_id": {"type": "string"},
        "log_start_offset": _INT64, "log_end_offset": _INT64,
        "lineage": {"type": "array", "items": _ref("EpochStart")},
        "gaps": {"type": "array", "items": {"type": "object", "properties": {
            "first_offset": _INT64, "last_offset": _INT64}}},
        "segments": {"type": "array", "items": {"type": "object", "properties": {
            "segment_id": {"type": "string"}, "first_offset": _INT64, "last_offset": _INT64,
            "start_offset": _INT64, "end_offset": _INT64, "size_bytes": _INT64,
            "max_timestamp_ms": _INT64, "truncated": {"type": "boolean"},
            "leader_epochs": {"type": "array", "items": _ref("EpochStart")}}}}}},
    "Offsets": {"type": "object", "required": ["topic", "timestamp", "partitions"], "properties": {
        "topic": {"type": "string"}, "timestamp": _INT64,
        "partitions": {"type": "array", "items": {"type": "object", "properties": {
            "partition": {"type": "integer"}, "offset": _NULL_INT, "timestamp": _NULL_INT,
            "leader_epoch": {"type": "integer", "nullable": True},
            "source": {"type": "string", "enum": ["remote", "broker"], "nullable": True}}}}}},
    "Health": {"type": "object", "required": ["status"], "properties": {
        "status": {"type": "string"}, "topics": {"type": "integer"}}},
}

_RECORDS_HEADERS = {
    "X-Next-Offset": {"description": "Offset to ask for next (raw and NDJSON)", "schema": _INT64},
    "X-Log-Start-Offset": {"description": "Remote log start offset", "schema": _INT64},
    "X-Log-End-Offset": {"description": "Remote log end offset (exclusive)", "schema": _INT64},
}


def _get(summary: str, parameters: list[dict[str, Any]], ok: dict[str, Any],
         errors: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": parameters, "responses": {"200": ok, **errors}}}


def _json_ok(schema: str) -> dict[str, Any]:
    return {"description": "OK", "content": {"application/json": {"schema": _ref(schema)}}}


def openapi_document() -> dict[str, Any]:
    records_ok = {"description": "Records from the requested position", "headers": _RECORDS_HEADERS,
                  "content": {NDJSON: {"schema": {"type": "string"}},
                              RAW: {"schema": {"type": "string", "format": "binary"}},
                              ARROW: {"schema": {"type": "string", "format": "binary"}}}}
    records_params = [
        _TOPIC, _PARTITION,
        {"name": "offset", "in": "query",
         "description": "First offset (default: the remote log start; or give timestamp)",
         "schema": {"type": "integer", "format": "int64", "minimum": 0}},
        {"name": "timestamp", "in": "query", "description": "Start at the first record with a timestamp "
         f"at or after it. {_TIMESTAMP_DOC}", "schema": _TIMESTAMP},
        {"name": "max_bytes", "in": "query", "description": "Byte budget of the answer (at least one batch)",
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_FETCH_BYTES,
                    "default": DEFAULT_FETCH_BYTES}},
        {"name": "isolation", "in": "query",
         "schema": {"type": "string", "enum": ["read_uncommitted", "read_committed"],
                    "default": "read_uncommitted"}},
    ]
    return {
        "openapi": "3.0.3",
        "info": {"title": "rlm remote read API", "version": "1",
                 "description": "Historical reads of Kafka partitions from tiered (remote) storage."},
        "paths": {
            "/v1/topics": _get("Topics with remote data", [], _json_ok("Topics"), _COMMON_ERRORS | {
                "503": _READ_ERRORS["503"]}),
            "/v1/topics/{topic}/partitions/{partition}/segments": _get(
                "The partition's remote segments on the leader-epoch lineage, and its gaps",
                [_TOPIC, _PARTITION], _json_ok("Plan"),
                {k: v for k, v in _READ_ERRORS.items() if k not in ("429", "504", "502")}),
            "/v1/topics/{topic}/partitions/{partition}/records": _get(
                "Records from an offset or timestamp", records_params, records_ok, {
                    **_READ_ERRORS,
                    "406": _error("Accept allows none of the record media types"),
                    "416": _error("The offset is outside the remote range (range in the body)")}),
            "/v1/topics/{topic}/offsets": _get(
                "Offset for a timestamp in every partition (remote, or the broker past the remote end)",
                [_TOPIC, {"name": "timestamp", "in": "query", "required": True, "description": _TIMESTAMP_DOC,
                          "schema": _TIMESTAMP}],
                _json_ok("Offsets"), _READ_ERRORS),
            "/metrics": _get("Prometheus metrics", [], {"description": "Text exposition format",
                             "content": {"text/plain": {"schema": {"type": "string"}}}}, _COMMON_ERRORS),
            "/health": _get("Liveness and metadata reachability", [], _json_ok("Health"),
                            {"500": _COMMON_ERRORS["500"], "503": _READ_ERRORS["503"]}),
        },
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
