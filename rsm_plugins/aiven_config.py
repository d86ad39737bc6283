"""The ``aiven`` layout's configuration, and the broker's own ``rsm.config.*`` lines mapped to it.

An operator of a Kafka ≥ 3.9 cluster that tiers with Aiven's plugin already has the settings
that say where the objects are and how to decrypt them: the broker's
``remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager`` and
its ``rsm.config.*`` lines. They are accepted here as written (Kafka strips the ``rsm.config.``
prefix before the plugin sees them, and so does ``rlm.config``), translated to this plugin's own
keys: the storage backend becomes one of our storage plugins (``local`` for Aiven's
``FileSystemStorage``, ``s3`` for ``S3Storage``) whose block is built from
``storage.*``; the key prefix and the key pairs are kept. Settings that only shape *writing* or
the broker's own caches are accepted and ignored (the manifest of each segment says how it was
written); anything that would change where or how bytes are read and is not supported is named
in a :class:`ConfigError` rather than silently misread.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from .api import ConfigError, PluginConfig

log = structlog.get_logger(__name__)

FILESYSTEM_STORAGE = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
S3_STORAGE = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
_BACKENDS = {FILESYSTEM_STORAGE: "local", S3_STORAGE: "s3"}

#: Aiven's S3Storage keys (after ``storage.``) → our ``s3`` plugin's keys
_S3_KEYS = {
    "s3.bucket.name": "bucket",
    "s3.region": "region",
    "s3.endpoint.url": "endpoint_url",
    "s3.path.style.access.enabled": "path_style",
    "aws.access.key.id": "access_key_id",
    "aws.secret.access.key": "secret_access_key",
}
#: settings that shape writing, or the broker's caches and metrics: nothing a reader needs
_IGNORED_PREFIXES = (
    "compression.heuristic.enabled",
    "upload.rate.limit.",
    "custom.metadata.fields.include",
    "key.prefix.mask",
    "fetch.chunk.cache.",
    "fetch.manifest.cache.retention.ms",
    "fetch.indexes.cache.",
    "segment.manifest.cache.",
    "metrics.",
    "storage.s3.multipart.upload.part.size",
    "storage.upload.part.size",
    "storage.s3.api.call.",
    "storage.s3.storage.class",
    "storage.aws.checksum.check.enabled",
    "storage.aws.certificate.check.enabled",
    "storage.overwrite.enabled",
)


class KeyPairConfig(BaseModel):
    """One RSA key pair; only the private key is used (reading unwraps, never wraps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    private_key_file: Path = Field(description="PEM, PKCS#8 ('BEGIN PRIVATE KEY') or PKCS#1.")
    public_key_file: Path | None = Field(None, description="Accepted for the broker's lines; unused.")


class AivenConfig(PluginConfig):
    """Read Aiven's object layout (``.log`` chunks, ``.indexes``, ``.rsm-manifest``) over one of
    our storage plugins. Read-only: copies and deletes are refused."""

    backend: Literal["local", "s3", "fsspec"] = Field(
        "local", description="The storage plugin the objects are read through (its block: backend_config)."
    )
    backend_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The backend plugin's block: root (local), bucket (s3), url (fsspec).",
    )
    key_prefix: str = Field("", description="Aiven's key.prefix, prepended verbatim to every object key.")
    chunk_size: int | None = Field(
        None, ge=1, description="Aiven's chunk.size; informative (each manifest records its own)."
    )
    compression_enabled: bool = Field(
        False, description="Informative: each manifest says if it is compressed."
    )
    encryption_enabled: bool = Field(False, description="Segments are encrypted: key_pairs are required.")
    encryption_key_pair_id: str | None = Field(None, description="The active pair's id (informative).")
    key_pairs: dict[str, KeyPairConfig] = Field(
        default_factory=dict, description="RSA key pairs by id (encryption.key.pairs.<id>.private.key.file)."
    )
    manifest_cache_size: int = Field(
        1000, ge=0, description="Manifests kept in memory (fetch.manifest.cache.size)."
    )
    decoded_cache_bytes: int = Field(
        16 << 20, ge=0,
        description="Decrypted/decompressed chunks kept in memory, so reads that split an Aiven chunk "
        "between two read-side chunks decode it once.",
    )


def translate(config: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin block with the broker's Aiven keys turned into :class:`AivenConfig`'s keys.

    Keys already in our form pass through; ``backend.<key>`` lands in ``backend_config``.
    """
    out: dict[str, Any] = {}
    backend_cfg: dict[str, Any] = dict(config.get("backend_config") or config.get("backend.config") or {})
    storage: dict[str, Any] = {}
    pairs: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for raw_key, value in config.items():
        key = str(raw_key).strip()
        if key in ("backend_config", "backend.config"):
            continue
        if key.startswith(_IGNORED_PREFIXES):
            ignored.append(key)
        elif key.startswith("storage."):
            storage[key.removeprefix("storage.")] = value
        elif key.startswith("backend."):
            backend_cfg[key.removeprefix("backend.")] = value
        elif key.startswith(("encryption.key.pairs.", "key.pairs.", "key_pairs.")):
            rest = key.split("pairs.", 1)[1]
            pair_id, _, field = rest.partition(".")
            if not field:
                raise ConfigError(f"aiven storage plugin: {key!r} names no key-pair setting")
            pairs.setdefault(pair_id, {})[field.replace(".", "_").replace("-", "_")] = value
        elif key == "encryption.key.pairs":
            out["_key_pair_ids"] = value
        elif key == "segment.format":
            if str(value) != "kafka":
                raise ConfigError(
                    f"aiven storage plugin: segment.format={value!r} is not supported (only 'kafka': "
                    "the Iceberg mode stores tables, not segments)")
        elif key == "fetch.manifest.cache.size":
            out["manifest_cache_size"] = value
        else:
            out[key] = value
    if storage:
        out["backend"], mapped = _backend(storage)
        backend_cfg = {**mapped, **backend_cfg}
    if pairs:
        out["key_pairs"] = pairs
    ids = out.pop("_key_pair_ids", None)
    if ids is not None:
        listed = {s.strip() for s in str(ids).split(",") if s.strip()}
        missing = sorted(listed - set(pairs))
        if missing:
            raise ConfigError(f"aiven storage plugin: encryption.key.pairs lists {', '.join(missing)} "
                              "without a private.key.file")
    out["backend_config"] = backend_cfg
    if ignored:
        log.info("aiven_settings_ignored", keys=sorted(ignored), reason="write-side or broker cache settings")
    return out


def _backend(storage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    cls = str(storage.pop("backend.class", "") or "")
    if cls not in _BACKENDS:
        raise ConfigError(
            f"aiven storage plugin: storage.backend.class={cls or '(not set)'!r} is not supported; "
            f"supported: {FILESYSTEM_STORAGE}, {S3_STORAGE} (for others, set backend: fsspec with "
            "the filesystem's URL)")
    name = _BACKENDS[cls]
    mapped: dict[str, Any] = {}
    unsupported: list[str] = []
    for key, value in storage.items():
        if name == "local" and key == "root":
            mapped["root"] = value
        elif name == "s3" and key in _S3_KEYS:
            mapped[_S3_KEYS[key]] = value
        else:
            unsupported.append(f"storage.{key}")
    if unsupported:
        raise ConfigError(
            f"aiven storage plugin: {', '.join(sorted(unsupported))} not supported with {cls}"
            + (" (supported: storage.root)" if name == "local" else
               f" (supported: {', '.join('storage.' + k for k in _S3_KEYS)})"))
    return name, mapped
