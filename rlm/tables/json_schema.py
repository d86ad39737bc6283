"""A JSON Schema document (a registry's ``schemaType: JSON``) to the decoded columns it describes.

``iceberg.decode`` with ``format: json_schema`` and a ``subject`` takes its columns from the
subject's latest JSON Schema: one column per top-level property, in the document's order. The
mapping (JSON Schema -> Iceberg):

* ``string`` -> string; with ``format: date-time`` -> timestamptz, ``format: date`` -> date;
* ``integer`` -> long, ``number`` -> double, ``boolean`` -> boolean;
* ``object`` with ``properties`` -> struct of them, ``array`` with one ``items`` schema -> list;
* a property listed in its object's ``required`` is required (a record without it, or with
  null, is a dead letter); the others are nullable. A ``"type": [T, "null"]`` and a
  ``oneOf``/``anyOf`` of one schema and ``{"type": "null"}`` (what Confluent's Java generator
  writes for optional fields) are nullable T;
* local references (``$ref: "#/definitions/X"`` or ``"#/$defs/X"``) are followed.

What has no single column type — a union of several non-null types, an object without
``properties`` (a free-form map), a tuple ``items``, a remote ``$ref`` — is left out of the
columns (listed in :attr:`Columns.skipped`; the raw value keeps it), and so is what a
recursive schema nests deeper than 16 levels. Only the types are applied
to records: other keywords (``minimum``, ``pattern``, ``enum``, ``additionalProperties``) are not
checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm.config import DecodedField
from rlm.errors import ConfigError

_SIMPLE = {"integer": "long", "number": "double", "boolean": "boolean"}
_STRING_FORMATS = {"date-time": "timestamptz", "date": "date"}
_MAX_DEPTH = 16


class JsonSchemaError(ConfigError):
    """The subject's JSON Schema gives no columns (not an object schema, or nothing mappable)."""


@dataclass(slots=True)
class Columns:
    """The columns a JSON Schema gives, and the properties (dotted paths) it could not map."""

    fields: list[DecodedField]
    skipped: list[str] = field(default_factory=list)


def columns_from_json_schema(doc: Any, *, where: str = "the JSON Schema") -> Columns:
    """The decoded columns of ``doc`` (a parsed JSON Schema whose top level is an object)."""
    if not isinstance(doc, dict):
        raise JsonSchemaError(f"{where}: not a JSON Schema object")
    top = _resolve(doc, doc, where)
    props = top.get("properties") if isinstance(top, dict) else None
    if not isinstance(props, dict) or not props:
        raise JsonSchemaError(f"{where}: the top level is not an object schema with `properties`")
    out = Columns([])
    out.fields = _properties(top, doc, "", out.skipped)
    if not out.fields:
        raise JsonSchemaError(f"{where}: no property maps to a column (left out: {out.skipped})")
    return out


def _df(**kw: Any) -> DecodedField:
    return DecodedField.model_validate(kw)


def _properties(node: dict[str, Any], root: dict[str, Any], prefix: str,
                skipped: list[str]) -> list[DecodedField]:
    required = set(node.get("required") or [])
    fields: list[DecodedField] = []
    for name, sub in node["properties"].items():
        f = _field(str(name), sub, root, prefix + str(name), skipped)
        if f is not None:
            fields.append(f.model_copy(update={"required": name in required}))
    return fields


def _field(name: str, node: Any, root: dict[str, Any], path: str, skipped: list[str]) -> DecodedField | None:
    if path.count(".") + path.count("[]") >= _MAX_DEPTH:  # a recursive schema (a tree): cut here
        skipped.append(path)
        return None
    kind, node = _kind(node, root)
    if kind == "string":
        return _df(name=name, type=_STRING_FORMATS.get(str(node.get("format")), "string"))
    if kind in _SIMPLE:
        return _df(name=name, type=_SIMPLE[kind])
    if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
        children = _properties(node, root, path + ".", skipped)
        if children:
            return _df(name=name, type="struct", fields=children)
    elif kind == "array" and isinstance(node.get("items"), dict):
        element = _field("element", node["items"], root, path + "[]", skipped)
        if element is not None:
            return _df(name=name, type="list", element=element)
        return None  # the element's path is already listed
    skipped.append(path)
    return None


def _kind(node: Any, root: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The one non-null JSON type ``node`` allows (None when it is not exactly one), and the node."""
    node = _resolve(node, root, "")
    if not isinstance(node, dict):
        return None, {}
    types = node.get("type")
    if isinstance(types, list):
        rest = [t for t in types if t != "null"]
        return (str(rest[0]) if len(rest) == 1 else None), node
    if isinstance(types, str):
        return types, node
    for key in ("oneOf", "anyOf"):
        alts = node.get(key)
        if isinstance(alts, list):
            rest = [a for a in alts if _resolve(a, root, "") != {"type": "null"}
                    and not (isinstance(a, dict) and a.get("type") == "null")]
            return _kind(rest[0], root) if len(rest) == 1 else (None, node)
    return None, node


def _resolve(node: Any, root: dict[str, Any], where: str) -> Any:
    """Follow local ``$ref``s (``#/definitions/X``, ``#/$defs/X``); anything else is returned as is."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#"):
        seen += 1
        if seen > 32:
            raise JsonSchemaError(f"{where or 'the JSON Schema'}: $ref loop at {node['$ref']!r}")
        target: Any = root
        for part in node["$ref"][1:].strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return {}
            target = target[part]
        node = target
    return node
