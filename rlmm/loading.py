"""Find, import and configure a metadata manager by name: the same lookup as storage plugins.

Kafka lets brokers plug in their own ``RemoteLogMetadataManager``
(``remote.log.metadata.manager.class.name``); so does the sidecar. Lookup order (one function,
:class:`rlm.plugin_registry.PluginFamily`, shared with :mod:`rsm_plugins.loading`):

1. a built-in name: ``file`` (embedded) and ``topic`` (``__remote_log_metadata``), and Kafka's
   class names of the topic-based manager as aliases of ``topic``;
2. an entry point in group ``rlmm_plugins`` (how third-party packages register, see
   ``examples/custom_rlmm``);
3. an explicit ``package.module:Class`` or ``package.module.Class`` path.

The class must subclass :class:`rlmm.api.RemoteLogMetadataManager`. A manager whose module cannot
be imported raises :class:`~rlm.errors.PluginLoadError` saying what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlm.plugin_registry import BuiltIn, PluginFamily

from .api import RemoteLogMetadataManager

ENTRY_POINT_GROUP = "rlmm_plugins"

BUILTINS: dict[str, BuiltIn] = {
    "file": BuiltIn("rlmm.file:FileRemoteLogMetadataManager", "kafka-rlm-sidecar"),
    "topic": BuiltIn(
        "rlmm.topic:TopicBasedRemoteLogMetadataManager", "confluent-kafka (a dependency of kafka-rlm-sidecar)"
    ),
}
ALIASES: dict[str, str] = {
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager": "topic",
}

FAMILY: PluginFamily[RemoteLogMetadataManager] = PluginFamily(
    "metadata manager", RemoteLogMetadataManager, ENTRY_POINT_GROUP, BUILTINS, ALIASES, "rlmm_loaded"
)


def available() -> dict[str, str]:
    """Every manager name that :func:`load` knows, with its target (built-ins, then entry points)."""
    return FAMILY.available()


def resolve(name_or_class_path: str) -> type[RemoteLogMetadataManager]:
    """The manager class for a built-in name, an alias, an entry point name or a class path."""
    return FAMILY.resolve(name_or_class_path)


def builtin_name(name_or_class_path: str) -> str | None:
    """``"file"`` or ``"topic"`` when the name denotes a built-in (by name, alias or class path)."""
    return FAMILY.builtin_name(name_or_class_path)


def load(name_or_class_path: str, config: Mapping[str, Any] | None = None) -> RemoteLogMetadataManager:
    """Create and configure (which starts) a manager. ``config`` is Kafka's ``rlmm.config.*`` with
    the prefix stripped, plus ``broker.id``, which every manager must accept."""
    return FAMILY.load(name_or_class_path, config)
