"""Create the storage plugin and the metadata manager from the shared configuration.

Layer: above ``rsm_plugins`` and ``rlmm``, below the daemon and the read side (``fetcher``), which
both build their plugins here so that defaults cannot diverge between writer and reader.

Defaults keep everything the daemon owns under its work dir: the ``local`` plugin stores in
``<work_dir>/remote`` and the ``file`` manager in ``<work_dir>/metadata`` unless configured.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlm.config import DaemonConfig
from rlm.errors import PluginLoadError

RLMM_BUILTINS = {
    "file": "rlmm.file:FileRemoteLogMetadataManager",
    "topic": "rlmm.topic:TopicBasedRemoteLogMetadataManager",
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager": (
        "rlmm.topic:TopicBasedRemoteLogMetadataManager"
    ),
}


def load_rsm(config: DaemonConfig, node_id: int) -> Any:
    import rsm_plugins

    cfg: dict[str, Any] = dict(config.storage.config)
    if config.storage.plugin == "local" and "root" not in cfg and "dir" not in cfg:
        cfg["root"] = str(config.work_dir / "remote")
    if config.storage.plugin == "s3":  # the per-request timeout, unless the block sets its own
        for key in ("connect_timeout", "read_timeout"):
            if key not in cfg and key.replace("_", ".") not in cfg:
                cfg[key] = config.storage_request_timeout_ms / 1000
    cfg.setdefault("broker.id", node_id)
    return _configure_with_broker_id(rsm_plugins.load, config.storage.plugin, cfg)


def _configure_with_broker_id(load: Any, name: str, cfg: dict[str, Any]) -> Any:
    """Pass ``broker.id`` as Kafka does; a plugin whose config model forbids it gets the rest."""
    from rlm.errors import ConfigError

    try:
        return load(name, cfg)
    except ConfigError as e:
        if "broker.id" not in str(e):
            raise
        rest = {k: v for k, v in cfg.items() if k != "broker.id"}
        return load(name, rest)


def rlmm_class(name: str) -> Any:
    target = RLMM_BUILTINS.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise PluginLoadError(f"metadata manager {name!r} ({target}) cannot be loaded: {e}") from e


def rlmm_settings(config: DaemonConfig, node_id: int, *, read_only: bool = False) -> dict[str, Any]:
    """The metadata manager's configuration with the daemon's defaults filled in; ``read_only`` for
    the read side: the embedded file store is followed without its writer lock, the topic store
    keeps its snapshots apart from the daemon's."""
    cfg: dict[str, Any] = dict(config.metadata.config)
    kind = RLMM_BUILTINS.get(config.metadata.manager, config.metadata.manager)
    if kind.endswith("FileRemoteLogMetadataManager"):
        cfg.setdefault("dir", str(config.work_dir / "metadata"))
        if read_only:
            cfg["read.only"] = True
    if kind.endswith("TopicBasedRemoteLogMetadataManager"):
        if config.bootstrap_servers and not any(k.endswith("bootstrap.servers") for k in cfg):
            cfg["bootstrap.servers"] = config.bootstrap_servers
        cfg.setdefault("log.dir", str(config.work_dir / ("rlmm-reader" if read_only else "rlmm")))
        cfg.setdefault("remote.log.metadata.consume.wait.ms", config.metadata_request_timeout_ms)
    cfg.setdefault("broker.id", node_id)
    return cfg


def load_rlmm(config: DaemonConfig, node_id: int, *, read_only: bool = False) -> Any:
    cls = rlmm_class(config.metadata.manager)
    manager = cls()
    manager.configure(rlmm_settings(config, node_id, read_only=read_only))
    return manager
