"""Create the storage plugin and the metadata manager from the shared configuration.

Layer: above ``rsm_plugins`` and ``rlmm``, below the daemon and the read side (``fetcher``), which
both build their plugins here so that defaults cannot diverge between writer and reader. Both
families are found the same way (:mod:`rsm_plugins.loading`, :mod:`rlmm.loading`) and both get
Kafka's ``broker.id``, which every plugin accepts (the storage plugin base model ignores it).

Defaults keep everything the daemon owns under its work dir: the ``local`` plugin stores in
``<work_dir>/remote`` and the ``file`` manager in ``<work_dir>/metadata`` unless configured.
"""

from __future__ import annotations

from typing import Any

import rlmm.loading
import rsm_plugins
from rlm.config import DaemonConfig
from rlmm.api import RemoteLogMetadataManager
from rlmm.topic_config import BROKER_PREFIX, COMMON_CLIENT_PREFIX
from rsm_plugins.api import RemoteStorageManager


def rsm_settings(config: DaemonConfig, node_id: int) -> dict[str, Any]:
    """The storage plugin's block with the daemon's defaults filled in."""
    cfg: dict[str, Any] = dict(config.storage.config)
    kind = rsm_plugins.loading.builtin_name(config.storage.plugin)
    if kind == "local" and "root" not in cfg and "dir" not in cfg:
        cfg["root"] = str(config.work_dir / "remote")
    if kind == "s3":  # the per-request timeout, unless the block sets its own
        for key in ("connect_timeout", "read_timeout"):
            if key not in cfg and key.replace("_", ".") not in cfg:
                cfg[key] = config.storage_request_timeout_ms / 1000
    cfg.setdefault("broker.id", node_id)
    return cfg


def load_rsm(config: DaemonConfig, node_id: int) -> RemoteStorageManager:
    return rsm_plugins.load(config.storage.plugin, rsm_settings(config, node_id))


def rlmm_settings(config: DaemonConfig, node_id: int, *, read_only: bool = False) -> dict[str, Any]:
    """The metadata manager's configuration with the daemon's defaults filled in; ``read_only`` for
    the read side: the embedded file store is followed without its writer lock, the topic store
    keeps its snapshots apart from the daemon's. A topic store without a bootstrap of its own uses
    ``bootstrap_servers`` and, as defaults of its common client settings, ``kafka_client`` (TLS or
    SASL settings are given once)."""
    cfg: dict[str, Any] = dict(config.metadata.config)
    kind = rlmm.loading.builtin_name(config.metadata.manager)
    if kind == "file":
        cfg.setdefault("dir", str(config.work_dir / "metadata"))
        if read_only:
            cfg["read.only"] = True
    if kind == "topic":
        if config.bootstrap_servers and not any(k.endswith("bootstrap.servers") for k in cfg):
            # The metadata topic lives on the daemon's own cluster: it needs the same login
            cfg["bootstrap.servers"] = config.bootstrap_servers
            given = {k.removeprefix(BROKER_PREFIX) for k in cfg}
            for key, value in config.kafka_client.items():
                if COMMON_CLIENT_PREFIX + key not in given:
                    cfg[COMMON_CLIENT_PREFIX + key] = value
        cfg.setdefault("log.dir", str(config.work_dir / ("rlmm-reader" if read_only else "rlmm")))
        if read_only and _read_only_storage(config):
            # reading a broker's own tiered storage: its metadata topic is only ever consumed
            cfg.setdefault("remote.log.metadata.topic.create", False)
        cfg.setdefault("remote.log.metadata.consume.wait.ms", config.metadata_request_timeout_ms)
    cfg.setdefault("broker.id", node_id)
    return cfg


def _read_only_storage(config: DaemonConfig) -> bool:
    """Whether the storage plugin only reads a layout another system owns (``aiven``)."""
    try:
        return bool(rsm_plugins.loading.resolve(config.storage.plugin).read_only)
    except Exception:  # an unloadable plugin fails with its own message when it is loaded
        return False


def load_rlmm(config: DaemonConfig, node_id: int, *, read_only: bool = False) -> RemoteLogMetadataManager:
    return rlmm.loading.load(config.metadata.manager, rlmm_settings(config, node_id, read_only=read_only))
