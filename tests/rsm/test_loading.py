"""``rsm_plugins.load``: built-in names, Kafka's class name, class paths, and errors that say what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rsm_plugins
from rlm.errors import ConfigError, PluginLoadError
from rsm_plugins.fsspec_rsm import FsspecRemoteStorageManager
from rsm_plugins.local import LocalRemoteStorageManager


def test_builtins_resolve() -> None:
    assert rsm_plugins.resolve("local") is LocalRemoteStorageManager
    assert rsm_plugins.resolve("fsspec") is FsspecRemoteStorageManager
    assert rsm_plugins.resolve("s3").__name__ == "S3RemoteStorageManager"
    assert (
        rsm_plugins.resolve("org.apache.kafka.server.log.remote.storage.LocalTieredStorage")
        is LocalRemoteStorageManager
    )
    assert {"local", "s3", "fsspec"} <= set(rsm_plugins.available())


@pytest.mark.parametrize(
    "path", ["rsm_plugins.local:LocalRemoteStorageManager", "rsm_plugins.local.LocalRemoteStorageManager"]
)
def test_class_path(path: str, tmp_path: Path) -> None:
    rsm = rsm_plugins.load(path, {"root": str(tmp_path)})
    assert isinstance(rsm, LocalRemoteStorageManager)
    assert rsm.root == tmp_path


def test_unknown_name() -> None:
    with pytest.raises(PluginLoadError, match=r"unknown storage plugin 'nope'.*rsm_plugins"):
        rsm_plugins.load("nope", {})


def test_missing_module_says_what_to_install() -> None:
    with pytest.raises(PluginLoadError, match="install the package that provides 'acme_tiered'"):
        rsm_plugins.load("acme_tiered.storage:AcmeRSM", {})


def test_builtin_with_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in [m for m in sys.modules if m.startswith("rsm_plugins.s3")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "botocore.exceptions", None)
    with pytest.raises(PluginLoadError, match=r"install boto3 \(pip install 'kafka-rlm-sidecar\[s3\]'\)"):
        rsm_plugins.load("s3", {"bucket": "abc"})


def test_not_a_plugin_class() -> None:
    with pytest.raises(PluginLoadError, match="not a subclass"):
        rsm_plugins.load("collections:OrderedDict", {})
    with pytest.raises(PluginLoadError, match="has no 'Nope'"):
        rsm_plugins.load("rsm_plugins.local:Nope", {})


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of 'root' or 'dir'"):
        rsm_plugins.load("local", {})
    with pytest.raises(ConfigError, match="colour"):
        rsm_plugins.load("local", {"root": str(tmp_path), "colour": "blue"})
    with pytest.raises(ConfigError, match="bucket"):
        rsm_plugins.load("s3", {"prefix": "x/"})
    with pytest.raises(ConfigError, match="given twice"):
        rsm_plugins.load("local", {"root": str(tmp_path), "broker.id": 1, "broker_id": 1})


def test_kafka_style_keys(tmp_path: Path) -> None:
    rsm = rsm_plugins.load("local", {"dir": str(tmp_path), "broker.id": "3", "delete.enable": "false"})
    assert isinstance(rsm, LocalRemoteStorageManager)
    assert rsm.root == tmp_path / "kafka-tiered-storage"
    assert rsm.config.broker_id == 3 and rsm.config.delete_enable is False
