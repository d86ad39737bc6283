"""Shared configuration handling for the built-in plugins.

Each plugin validates its own block with a pydantic model (``extra="forbid"``). Keys may be
written Kafka style (``endpoint.url``, ``broker.id``) or Python style (``endpoint_url``): dots
and dashes become underscores before validation. Error messages name the key and never echo the
value, so secrets cannot leak through a bad config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlm.errors import ConfigError

from .integrity import DEFAULT_MAX_BYTES


class PluginConfig(BaseModel):
    """Keys every built-in plugin accepts."""

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


C = TypeVar("C", bound=PluginConfig)


def normalize_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        norm = str(key).strip().replace(".", "_").replace("-", "_")
        if norm in out:
            raise ConfigError(f"configuration key {key!r} is given twice (as {norm!r})")
        out[norm] = value
    return out


def parse_config(model: type[C], config: Mapping[str, Any], plugin: str) -> C:
    """Validate ``config`` against ``model``; :class:`ConfigError` lists the bad keys only."""
    try:
        return model.model_validate(normalize_keys(config))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"invalid {plugin} storage plugin config: {problems}") from None
