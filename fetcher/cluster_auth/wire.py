"""The Kafka protocol as the sidecar speaks it to brokers: kio entities filled by field name,
request frames out, response frames in (the Kafka face's own frames: :mod:`fetcher.kafka.codec`)."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity, RequestPayload, ResponsePayload


def response_class(key: int, version: int) -> type[ResponsePayload]:
    return load_response_schema(key, version)


def make(cls: type[Entity], **values: Any) -> Any:
    """An instance of ``cls`` from the values it has fields for (other versions' fields dropped)."""
    known = cls.__dataclass_fields__
    return cls(**{k: v for k, v in values.items() if k in known})


def encode_request(req: RequestPayload, correlation_id: int, client_id: str) -> bytes:
    """A request frame (size prefix, header v1/v2, body): the endpoint as a client of a broker."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    hcls: Any = req.__header_schema__
    header = hcls(
        request_api_key=req.__api_key__,
        request_api_version=req.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(hcls)(buf, header)
    entity_writer(type(req))(buf, req)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def read_response(req_cls: type[RequestPayload], data: bytes) -> tuple[int, Any]:
    """(correlation id, response) of a broker's response frame (without its size prefix)."""
    cls = response_class(req_cls.__api_key__, req_cls.__version__)
    header, n = entity_reader(cls.__header_schema__)(data, 0)
    body, _ = entity_reader(cls)(data, n)
    return int(header.correlation_id), body



