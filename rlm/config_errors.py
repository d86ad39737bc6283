"""Turn pydantic validation errors into messages in the user's words.

Why a module of its own: pydantic reports the *field* path (``task_interval_ms``) and its own
phrasing ("Input should be a valid integer"), but the user may have written the Kafka name
(``remote.log.manager.task.interval.ms: 5s``) in a file. An operator fixing a config needs the key
as written, the bad value, the file, and — for typos — the key that was probably meant. The
daemon config and the built-in plugins' config blocks both use this, so the wording is the same
everywhere. Values of keys that look secret are never echoed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from rlm.secrets import is_secret_key

_SECRET = re.compile(r"secret|password|passwd|token|credential|sasl|ssl_key|key_id|private", re.I)
_MAX_VALUE = 60


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``word`` (difflib ratio >= 0.6, ``.``/``_`` spellings compared alike)."""
    dotted = "." in word
    # same-style spelling last so it wins: ``retention.mss`` -> ``retention.ms``, not ``retention_ms``
    cands = sorted(set(candidates), key=lambda c: ("." in c) == dotted)
    norm = {c.replace(".", "_").replace("-", "_").lower(): c for c in cands}
    key = word.replace(".", "_").replace("-", "_").lower()
    hit = difflib.get_close_matches(key, list(norm), n=1, cutoff=0.6)
    return norm[hit[0]] if hit else None


def show_value(key: str, value: Any) -> str:
    """``value`` for an error message: repr, shortened; masked when ``key`` looks like a secret."""
    if _SECRET.search(key) or is_secret_key(key) or isinstance(value, SecretStr):
        return "<hidden>"
    text = repr(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def kafka_names(model: type[BaseModel]) -> dict[str, str]:
    """field name -> Kafka property name, from ``json_schema_extra["kafka"]``."""
    out: dict[str, str] = {}
    for fname, f in model.model_fields.items():
        extra = f.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("kafka"), str):
            out[fname] = str(extra["kafka"])
    return out


def _submodel(model: type[BaseModel] | None, name: str) -> type[BaseModel] | None:
    """The model of field ``name`` of ``model`` (through ``list[...]`` and ``X | None``)."""
    if model is None or name not in model.model_fields:
        return None
    ann = model.model_fields[name].annotation
    stack: list[Any] = [ann]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
        stack.extend(getattr(t, "__args__", ()))
    return None


def _written_key(raw: Any, field: str, kafka: str | None) -> str:
    """How the user spelled ``field`` in ``raw`` (the Kafka name when that is what the file has)."""
    if isinstance(raw, Mapping) and kafka is not None and kafka in raw and field not in raw:
        return kafka
    return field


def _child(raw: Any, key: str | int) -> Any:
    if isinstance(raw, Mapping):
        return raw.get(key)
    if isinstance(raw, Sequence) and not isinstance(raw, str) and isinstance(key, int):
        return raw[key] if 0 <= key < len(raw) else None
    return None


def describe(
    err: Mapping[str, Any],
    model: type[BaseModel],
    raw: Any,
    *,
    moved: Mapping[tuple[str, str], str] | None = None,
    top_keys: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """One problem, e.g. ``remote.log.manager.task.interval.ms = '5s': not a valid integer``.

    ``moved`` maps (section, field) to a top-level key the user wrote that was moved into that
    section before validation (Kafka topic configs written at top level, for instance);
    ``top_keys`` are further top-level spellings offered as "did you mean" candidates. ``env``
    (variable name -> value) names the environment variable when the value came from there.
    """
    from_env = _env_name(err["loc"], env or {})
    if from_env is not None and err["type"] not in ("extra_forbidden", "missing"):
        return f"{from_env} (environment) = {show_value(from_env, err.get('input'))}: {_msg(err)}"
    parts: list[str] = []
    cur_model: type[BaseModel] | None = model
    cur_raw = raw
    loc = list(err["loc"])
    for i, p in enumerate(loc):
        if isinstance(p, int):
            parts[-1:] = [f"{parts[-1]}[{p}]"] if parts else [f"[{p}]"]
            cur_raw = _child(cur_raw, p)
            continue
        name = str(p)
        fields = kafka_names(cur_model) if cur_model is not None else {}
        written = _written_key(cur_raw, name, fields.get(name))
        if i == 1 and moved and isinstance(loc[0], str) and (loc[0], name) in moved:
            parts = [moved[(loc[0], name)]]
            cur_raw = raw.get(moved[(loc[0], name)]) if isinstance(raw, Mapping) else None
            cur_model = None
            continue
        parts.append(written)
        sub_raw = _child(cur_raw, written)
        cur_raw = sub_raw if sub_raw is not None or written != name else _child(cur_raw, name)
        cur_model = _submodel(cur_model, name)
    key = ".".join(parts) or "<root>"
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        hint = None
        if parent is not None:
            cands = list(parent.model_fields) + list(kafka_names(parent).values())
            if parent is model:
                cands += list(top_keys)
            hint = did_you_mean(str(loc[-1]), cands)
        return f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
    if err["type"] == "missing":
        return f"{key}: required, not set"
    if not loc:
        return str(err["msg"])
    return f"{key} = {show_value(key, err.get('input'))}: {_msg(err)}"


def _msg(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    msg = msg[0].lower() + msg[1:] if msg else msg
    return msg.replace("input should be", "should be")


def _env_name(loc: Sequence[Any], env: Mapping[str, str]) -> str | None:
    """``RLM_<A>__<B>`` when that variable is set: the environment overrides the file, so the bad
    value came from there."""
    if not loc or not all(isinstance(p, str) for p in loc):
        return None
    name = "RLM_" + "__".join(str(p) for p in loc).upper()
    hits = [k for k in env if k.upper() == name]
    return hits[0] if hits else None


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    cur: type[BaseModel] | None = model
    for p in loc:
        if isinstance(p, int):
            continue
        cur = _submodel(cur, str(p))
    return cur


def format_validation_error(
    e: ValidationError,
    model: type[BaseModel],
    raw: Any,
    source: str,
    *,
    moved: Mapping[tuple[str, str], str] | None = None,
    top_keys: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """``<source>: invalid configuration: <problem>; <problem>`` in the user's terms."""
    problems = [describe(err, model, raw, moved=moved, top_keys=top_keys, env=env) for err in e.errors()]
    return f"{source}: invalid configuration: " + "; ".join(problems)
