"""A registry's Protobuf schema to a descriptor pool, a message by its Confluent index path, and
the decoded columns a message's fields give.

A Confluent-compatible registry hands out a Protobuf schema as ``.proto`` source text (Confluent's
registry, Apicurio, Karapace) or, when it was registered that way and is served back as is, as a
base64 ``FileDescriptorProto`` (what confluent-kafka's Python serializer registers), with
``references`` (name, subject, version) for its imports. Text is compiled by a real compiler,
``protoc`` from ``grpc_tools`` (the well-known ``google/protobuf/*.proto`` come with it), into a
``FileDescriptorSet`` with its imports; serialized descriptors are taken as they are. Either way
the files go into a descriptor pool of their own (two versions of one schema declare the same
names, so each schema id gets its own pool).

The columns (Protobuf -> Iceberg):

* ``int32``, ``sint32``, ``sfixed32`` -> int; ``int64``, ``sint64``, ``sfixed64``, ``uint32``,
  ``fixed32`` -> long; ``uint64``, ``fixed64`` -> long as well (a value above 2^63 - 1 makes its
  record a dead letter: Iceberg has no unsigned type, and decimal(20, 0) columns would make
  every common id column awkward to query);
* ``float``, ``double``, ``bool``, ``string``, ``bytes`` -> float, double, boolean, string, binary;
* an enum -> string (the value's name; a number the enum does not declare: the number as text);
* ``google.protobuf.Timestamp`` -> timestamptz (microseconds: nanoseconds are truncated);
* another message -> struct of its fields; ``repeated`` -> list; ``map<K, V>`` -> map;
* every column is optional in the table; a proto2 ``required`` field (top level) missing makes
  its record a dead letter; a field with presence (a message field, proto3 ``optional``, a
  ``oneof`` member, proto2 ``optional``) is null when the record does not set it, a proto3 scalar
  without presence is its default (0, ``""``) as in every Protobuf reader.

A message with no fields gives no column, nor does a field whose message type contains itself
(a recursive message such as ``google.protobuf.Struct``'s values: cut where it recurs), and
nesting is cut 16 levels deep (all listed in :attr:`Columns.skipped`; the raw value keeps them).
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.config import DecodedField
from rlm.errors import ConfigError

_MAX_DEPTH = 16
TIMESTAMP = "google.protobuf.Timestamp"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


class ProtobufSchemaError(ConfigError):
    """A Protobuf schema that does not compile, or a message that is not in it."""


@dataclass(slots=True)
class Columns:
    """The columns a message gives, and the fields (dotted paths) it could not map."""

    fields: list[DecodedField]
    skipped: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Source:
    """One file of a schema: its import name, and its text (``.proto``) or serialized descriptor."""

    name: str
    text: str
    refs: list[str]  # the import names it references


def _descriptor_pb2() -> Any:
    from google.protobuf import descriptor_pb2  # the iceberg extra

    return descriptor_pb2


def serialized(text: str) -> bytes | None:
    """The bytes of a base64 ``FileDescriptorProto`` (None: ``text`` is ``.proto`` source)."""
    if not _BASE64.fullmatch(text) or "syntax" in text:
        return None
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def compile_files(sources: list[Source]) -> list[Any]:
    """The ``FileDescriptorProto``s of ``sources`` (the root first in the list, its imports after)
    and of the well-known files they import, in dependency order (imports first)."""
    pb2 = _descriptor_pb2()
    blobs = [serialized(s.text) for s in sources]
    if all(b is not None for b in blobs):
        protos = []
        for s, b in zip(sources, blobs, strict=True):
            fdp = pb2.FileDescriptorProto()
            try:
                fdp.ParseFromString(b)
            except Exception as e:  # DecodeError: not a descriptor after all
                raise ProtobufSchemaError(f"{s.name}: not a serialized FileDescriptorProto: {e}") from e
            fdp.name = s.name
            protos.append(fdp)
        return _with_well_known(protos)
    if any(b is not None for b in blobs):
        raise ProtobufSchemaError("a schema mixing .proto text and serialized descriptors")
    return _protoc(sources)


def _protoc(sources: list[Source]) -> list[Any]:
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or spec.origin is None:
        raise ProtobufSchemaError("grpc_tools (grpcio-tools, the iceberg extra) is not installed")
    include = Path(spec.origin).parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="rlm-proto-") as tmp:
        root = Path(tmp) / "src"
        for s in sources:
            path = (root / s.name).resolve()
            if not path.is_relative_to(root.resolve()):
                raise ProtobufSchemaError(f"import name {s.name!r} leaves the source tree")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(s.text)
        out = Path(tmp) / "set.pb"
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{include}", "--include_imports",
               f"--descriptor_set_out={out}", sources[0].name]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            why = " ".join(done.stderr.replace(str(root) + "/", "").split())
            raise ProtobufSchemaError(f"protoc: {why or 'exit ' + str(done.returncode)}")
        fds = _descriptor_pb2().FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
    return list(fds.file)  # --include_imports: imports before their importers


def _with_well_known(protos: list[Any]) -> list[Any]:
    """``protos`` in dependency order, with the ``google/protobuf`` files they import added."""
    from google.protobuf import (  # noqa: F401  (importing registers them in the default pool)
        any_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    by_name = {p.name: p for p in protos}
    done: dict[str, Any] = {}

    def visit(name: str, depth: int) -> None:
        if name in done:
            return
        if depth > 64:
            raise ProtobufSchemaError(f"import cycle at {name!r}")
        fdp = by_name.get(name)
        if fdp is None:
            try:
                known = descriptor_pool.Default().FindFileByName(name)
            except KeyError:
                raise ProtobufSchemaError(f"import {name!r}: no reference gives it") from None
            fdp = _descriptor_pb2().FileDescriptorProto()
            fdp.ParseFromString(known.serialized_pb)
        for dep in fdp.dependency:
            visit(dep, depth + 1)
        done[name] = fdp

    for p in protos:
        visit(p.name, 0)
    return list(done.values())


def build_pool(files: list[Any]) -> Any:
    """A descriptor pool of its own holding ``files`` (dependency order)."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    for fdp in files:
        try:
            pool.AddSerializedFile(fdp.SerializeToString())
        except Exception as e:  # TypeError/ValueError from the pool: a name declared twice, ...
            raise ProtobufSchemaError(f"{fdp.name}: {e}") from e
    return pool


def message_by_index(fdp: Any, path: list[int]) -> str | None:
    """The full name of the message Confluent's index ``path`` names in file ``fdp`` (the
    top-level message's position, then the nested ones'), None when it names none."""
    if not path:
        return None
    types = fdp.message_type
    names = [fdp.package] if fdp.package else []
    for i in path:
        if not 0 <= i < len(types):
            return None
        names.append(types[i].name)
        types = types[i].nested_type
    return ".".join(names)


def _df(**kw: Any) -> DecodedField:
    return DecodedField.model_validate(kw)


_INT = {"TYPE_INT32", "TYPE_SINT32", "TYPE_SFIXED32"}
_LONG = {"TYPE_INT64", "TYPE_SINT64", "TYPE_SFIXED64", "TYPE_UINT32", "TYPE_FIXED32", "TYPE_UINT64",
         "TYPE_FIXED64"}
_SIMPLE = {"TYPE_FLOAT": "float", "TYPE_DOUBLE": "double", "TYPE_BOOL": "boolean", "TYPE_STRING": "string",
           "TYPE_BYTES": "binary", "TYPE_ENUM": "string"}


def type_name(fd: Any) -> str:
    """``fd``'s type as ``descriptor_pb2``'s enum name (``TYPE_INT32``...)."""
    return str(_descriptor_pb2().FieldDescriptorProto.Type.Name(fd.type))


def is_map(fd: Any) -> bool:
    mt = fd.message_type
    return bool(mt is not None and mt.GetOptions().map_entry and _repeated(fd))


def _repeated(fd: Any) -> bool:
    return bool(fd.is_repeated)


def is_repeated(fd: Any) -> bool:
    return _repeated(fd)


def columns_from_message(desc: Any) -> Columns:
    """The decoded columns of message descriptor ``desc``: one per field, in declaration order."""
    out = Columns([])
    out.fields = _fields(desc, "", out.skipped, (desc.full_name,))
    return out


def _fields(desc: Any, prefix: str, skipped: list[str], seen: tuple[str, ...]) -> list[DecodedField]:
    fields = []
    for fd in desc.fields:
        f = _field(fd.name, fd, prefix + fd.name, skipped, seen)
        if f is not None:
            fields.append(f)
    return fields


def _field(name: str, fd: Any, path: str, skipped: list[str], seen: tuple[str, ...]) -> DecodedField | None:
    if is_map(fd):
        entry = fd.message_type
        key = _single("key", entry.fields_by_name["key"], path + ".key", skipped, seen)
        value = _single("value", entry.fields_by_name["value"], path + ".value", skipped, seen)
        if key is None or value is None:
            return None
        return _df(name=name, type="map", key=key, value=value)
    one = _single(name, fd, path, skipped, seen)
    if one is None:
        return None
    if not _repeated(fd):  # a proto2 `required` field missing makes a dead letter (top level)
        return one.model_copy(update={"required": True}) if fd.is_required else one
    return _df(name=name, type="list", element=one.model_copy(update={"name": "element"}))


def _single(name: str, fd: Any, path: str, skipped: list[str], seen: tuple[str, ...]) -> DecodedField | None:
    """The column of one value of ``fd`` (the element, for a repeated field)."""
    kind = type_name(fd)
    if kind in _INT:
        return _df(name=name, type="int")
    if kind in _LONG:
        return _df(name=name, type="long")
    if kind in _SIMPLE:
        return _df(name=name, type=_SIMPLE[kind])
    # a message (or a proto2 group)
    if fd.message_type.full_name == TIMESTAMP:
        return _df(name=name, type="timestamptz")
    mt = fd.message_type
    if mt.full_name in seen or path.count(".") >= _MAX_DEPTH:  # a recursive message (a tree): cut
        skipped.append(path)
        return None
    children = _fields(mt, path + ".", skipped, (*seen, mt.full_name))
    if not children:
        skipped.append(path)
        return None
    return _df(name=name, type="struct", fields=children)
