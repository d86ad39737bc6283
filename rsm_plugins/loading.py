"""Find, import and configure a storage plugin by name.

Lookup order (one function, as fsspec's registry does):

1. a built-in name: ``local``, ``s3``, ``fsspec``, ``aiven`` (and Kafka's ``LocalTieredStorage``
   class name, an alias of ``local``; Aiven's ``RemoteStorageManager`` class name, of ``aiven``);
2. an entry point in group ``rsm_plugins`` (how third-party packages register);
3. an explicit ``package.module:Class`` or ``package.module.Class`` path, like Kafka's
   ``remote.log.storage.manager.class.name``.

A plugin whose module cannot be imported raises :class:`PluginLoadError` saying what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlm.plugin_registry import BuiltIn, PluginFamily

from .api import RemoteStorageManager

ENTRY_POINT_GROUP = "rsm_plugins"

BUILTINS: dict[str, BuiltIn] = {
    "local": BuiltIn("rsm_plugins.local:LocalRemoteStorageManager", "kafka-rlm-sidecar"),
    "s3": BuiltIn("rsm_plugins.s3:S3RemoteStorageManager", "boto3 (pip install 'kafka-rlm-sidecar[s3]')"),
    "fsspec": BuiltIn(
        "rsm_plugins.fsspec_rsm:FsspecRemoteStorageManager",
        "fsspec plus the filesystem's own package, e.g. s3fs, gcsfs, adlfs "
        "(pip install 'kafka-rlm-sidecar[hdfs]' for HDFS)",
    ),
    "aiven": BuiltIn(
        "rsm_plugins.aiven:AivenRemoteStorageManager",
        "pycryptodome for encrypted segments (pip install 'kafka-rlm-sidecar[aiven]')",
    ),
}
ALIASES: dict[str, str] = {
    "org.apache.kafka.server.log.remote.storage.LocalTieredStorage": "local",
    # Aiven's plugin as the broker names it: its rsm.config.* lines are read as written (read-only)
    "io.aiven.kafka.tieredstorage.RemoteStorageManager": "aiven",
}

FAMILY: PluginFamily[RemoteStorageManager] = PluginFamily(
    "storage plugin", RemoteStorageManager, ENTRY_POINT_GROUP, BUILTINS, ALIASES, "rsm_loaded"
)


def available() -> dict[str, str]:
    """Every plugin name that :func:`load` knows, with its target (built-ins, then entry points)."""
    return FAMILY.available()


def resolve(name_or_class_path: str) -> type[RemoteStorageManager]:
    """The plugin class for a built-in name, an entry point name or a class path."""
    return FAMILY.resolve(name_or_class_path)


def builtin_name(name_or_class_path: str) -> str | None:
    """``"local"``, ``"s3"``, ``"fsspec"`` or ``"aiven"`` when the name denotes a built-in (name,
    alias or class path)."""
    return FAMILY.builtin_name(name_or_class_path)


def load(name_or_class_path: str, config: Mapping[str, Any] | None = None) -> RemoteStorageManager:
    """Create and configure a plugin. ``config`` is the plugin's block (Kafka's ``rsm.config.*``
    with the prefix stripped, plus ``broker.id``, which every plugin accepts)."""
    return FAMILY.load(name_or_class_path, config)
