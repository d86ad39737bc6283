"""Configuration parsing that every storage plugin shares (used by ``RemoteStorageManager.configure``).

Each plugin validates its own block with a pydantic model derived from :class:`PluginConfig`
(``extra="forbid"``). Keys may be written Kafka style (``endpoint.url``, ``broker.id``) or Python
style (``endpoint_url``): dots and dashes become underscores before validation. A bad block is
reported whole: every problem at once, each under the key as the user wrote it, with a "did you
mean" for unknown keys and the bad value only when the key does not look secret
(:mod:`rlm.config_errors`). Values the daemon's configuration marked secret arrive as
:class:`~pydantic.SecretStr` (:mod:`rlm.secrets`); they are unwrapped here so that a plugin may
type the field ``SecretStr`` (kept hidden: do that for every credential) or ``str``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlm.config_errors import did_you_mean, show_value
from rlm.errors import ConfigError
from rlm.secrets import reveal, reveal_all

from .integrity import DEFAULT_MAX_BYTES


class PluginConfig(BaseModel):
    """Keys every storage plugin accepts. Derive a plugin's model from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    broker_id: int | None = Field(None, description="Kafka passes broker.id to every RSM; informative only.")
    verify_checksums: bool = Field(
        True, description="Check CRC-32C of whole-file fetches against the copy's."
    )
    custom_metadata_max_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        ge=0,
        description="Budget for the returned custom metadata (the broker's "
        "remote.log.metadata.custom.metadata.max.bytes); 0 returns none.",
    )


C = TypeVar("C", bound=BaseModel)


def normalize_keys(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(values by field name, the key the user wrote by field name)``."""
    out: dict[str, Any] = {}
    written: dict[str, str] = {}
    for key, value in config.items():
        norm = str(key).strip().replace(".", "_").replace("-", "_")
        if norm in out:
            raise ConfigError(f"configuration key {key!r} is given twice (as {written[norm]!r})")
        out[norm] = reveal_all(value) if isinstance(value, Mapping) else reveal(value)
        written[norm] = str(key)
    return out, written


def parse_config(model: type[C], config: Mapping[str, Any], plugin: str) -> C:
    """Validate ``config`` against ``model``; one :class:`ConfigError` lists every bad key as written.

    Unknown keys get a "did you mean" from the model's fields; bad values are shown unless the
    key looks secret (see :mod:`rlm.config_errors`).
    """
    values, written = normalize_keys(config)
    try:
        return model.model_validate(values)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = [str(p) for p in err["loc"]]
            key = ".".join([written.get(loc[0], loc[0]), *loc[1:]]) if loc else "<root>"
            if err["type"] == "extra_forbidden":
                hint = did_you_mean(loc[0], model.model_fields) if loc else None
                problems.append(f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
            elif err["type"] == "missing":
                problems.append(f"{key}: required, not set")
            elif not loc:
                problems.append(str(err["msg"]))
            else:
                problems.append(f"{key} = {show_value(key, err.get('input'))}: {err['msg']}")
        raise ConfigError(
            f"invalid {plugin} storage plugin config ({len(problems)} problem"
            f"{'s' if len(problems) != 1 else ''}): " + "; ".join(problems)
        ) from None
