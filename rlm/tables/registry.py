"""Writer schemas by id from a Confluent-compatible Schema Registry, cached for the process.

Calls every Confluent-compatible registry answers (Confluent's own, Apicurio's
``/apis/ccompat/v7``, Karapace, Redpanda) are used: ``GET {url}/schemas/ids/{id}`` for a
record's writer schema, ``GET {url}/subjects/{subject}/versions/latest`` once at start when
the columns come from a subject's schema (``iceberg.decode.subject``), and
``GET {url}/subjects/{subject}/versions/{version}`` for the schemas a Protobuf schema imports
(its ``references``: name, subject, version). A schema id
names one schema forever, so a schema once fetched is kept; an id the registry does not know
(HTTP 404) is a property of the record (it goes to the dead-letter table), while a registry that
does not answer is a property of the moment: :class:`SchemaRegistryError` stops the pass, and the
segment is decoded on a later one rather than dead-lettered by an outage.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

import structlog

from rlm.config import SchemaRegistryConfig
from rlm.errors import RlmError

log = structlog.get_logger(__name__)


class SchemaRegistryError(RlmError):
    """The Schema Registry did not answer (or answered an error other than "no such id")."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's import of another registered schema (Protobuf ``import "name"``)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """One registered schema: its id, type (``AVRO`` when the registry leaves it out), text and
    references."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()


def _schema(schema_id: int, body: dict[str, Any]) -> WriterSchema:
    refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                 for r in body.get("references") or [])
    return WriterSchema(schema_id, str(body.get("schemaType") or "AVRO").upper(), str(body["schema"]), refs)


class SchemaRegistry:
    """A cached client of one registry. ``None`` from :meth:`get` = the registry has no such id."""

    def __init__(self, config: SchemaRegistryConfig) -> None:
        self.url = config.url.rstrip("/")
        self.timeout = config.timeout_s
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if config.username is not None:
            pw = config.password.get_secret_value() if config.password is not None else ""
            token = base64.b64encode(f"{config.username}:{pw}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._cache: dict[int, WriterSchema] = {}
        self._versions: dict[tuple[str, int], WriterSchema] = {}
        self.requests = 0

    def get(self, schema_id: int) -> WriterSchema | None:
        hit = self._cache.get(schema_id)
        if hit is not None:
            return hit
        body = self._fetch(schema_id)
        if body is None:
            return None
        schema = _schema(schema_id, body)
        self._cache[schema_id] = schema
        log.info("schema_registry_schema", id=schema_id, type=schema.schema_type)
        return schema

    def latest(self, subject: str) -> WriterSchema | None:
        """The latest version of ``subject`` (not cached: read once when the writer starts)."""
        body = self._fetch(f"subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        if body is None:
            return None
        schema = _schema(int(body["id"]), body)
        self._cache.setdefault(schema.schema_id, schema)
        return schema

    def version(self, subject: str, version: int) -> WriterSchema | None:
        """Version ``version`` of ``subject`` (a reference's target; a version never changes: cached)."""
        hit = self._versions.get((subject, version))
        if hit is not None:
            return hit
        body = self._fetch(f"subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}")
        if body is None:
            return None
        schema = _schema(int(body["id"]), body)
        self._versions[(subject, version)] = schema
        return schema

    def _fetch(self, path: str | int) -> dict[str, Any] | None:
        url = f"{self.url}/schemas/ids/{path}" if isinstance(path, int) else f"{self.url}/{path}"
        self.requests += 1
        req = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise SchemaRegistryError(f"schema registry {url}: HTTP {e.code} {e.reason}") from e
        except (OSError, ValueError) as e:
            raise SchemaRegistryError(f"schema registry {url}: {e}") from e
        if not isinstance(body, dict) or "schema" not in body:
            raise SchemaRegistryError(f"schema registry {url}: no `schema` in the answer")
        return body
