"""A third-party metadata manager: ``examples/custom_rlmm`` is installed into the venv, found by its
entry point name (directly and through the daemon's configuration) and passes the contract suite."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rlmm
from rlm.config import load_config
from rlm.errors import ConfigError, PluginLoadError
from rlm.plugin_setup import load_rlmm, rlmm_settings
from rlmm.api import RemoteLogMetadataManager
from rlmm.file import FileRemoteLogMetadataManager
from rlmm.testing import RemoteLogMetadataManagerContract
from tests.examples import install_example

NAME = "example-memory"


@pytest.fixture(scope="module")
def installed_manager() -> str:
    install_example("custom_rlmm", "custom-rlmm-example")
    return NAME


def test_found_by_entry_point_name(installed_manager: str) -> None:
    assert rlmm.available()[installed_manager] == "custom_rlmm:MemoryRemoteLogMetadataManager"
    cls = rlmm.resolve(installed_manager)
    assert cls.__module__ == "custom_rlmm" and issubclass(cls, RemoteLogMetadataManager)
    assert Path(sys.modules["custom_rlmm"].__file__ or "").is_relative_to(Path(sys.prefix))


def test_daemon_configuration_loads_it_by_name(installed_manager: str, tmp_path: Path) -> None:
    cfg = load_config(None, log_dirs=[str(tmp_path)], work_dir=str(tmp_path / "w"),
                      metadata={"manager": installed_manager, "config": {"namespace": "daemon"}})
    assert rlmm_settings(cfg, 4) == {"namespace": "daemon", "broker.id": 4}  # no file/topic defaults
    with load_rlmm(cfg, 4) as manager:
        assert type(manager).__name__ == "MemoryRemoteLogMetadataManager"


def test_its_config_errors_are_typed(installed_manager: str) -> None:
    with pytest.raises(ConfigError, match="colour"):
        rlmm.load(installed_manager, {"colour": "red"})


class TestCustomManagerContract(RemoteLogMetadataManagerContract):
    @pytest.fixture
    def rlmm_factory(self, installed_manager: str) -> Iterator[Callable[[], RemoteLogMetadataManager]]:
        opened: list[RemoteLogMetadataManager] = []
        namespace = uuid.uuid4().hex  # one durable state per test; a new instance on it = a restart

        def factory() -> RemoteLogMetadataManager:
            m = rlmm.load(installed_manager, {"namespace": namespace, "broker.id": 0})
            opened.append(m)
            return m

        yield factory
        for m in opened:
            m.close()


# ---- the loader itself (no example needed) ---------------------------------------------------------
def test_builtins_aliases_and_class_paths(tmp_path: Path) -> None:
    assert rlmm.resolve("file") is FileRemoteLogMetadataManager
    assert rlmm.resolve("rlmm.file:FileRemoteLogMetadataManager") is FileRemoteLogMetadataManager
    assert rlmm.resolve("rlmm.file.FileRemoteLogMetadataManager") is FileRemoteLogMetadataManager
    kafka_name = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
    assert rlmm.resolve(kafka_name).__name__ == "TopicBasedRemoteLogMetadataManager"
    assert rlmm.loading.builtin_name(kafka_name) == "topic"
    assert rlmm.loading.builtin_name("rlmm.file:FileRemoteLogMetadataManager") == "file"
    with rlmm.load("file", {"dir": str(tmp_path), "broker.id": 1}) as m:
        assert isinstance(m, FileRemoteLogMetadataManager)


def test_unknown_missing_and_wrong_class() -> None:
    with pytest.raises(PluginLoadError, match=r"unknown metadata manager 'nope'.*rlmm_plugins"):
        rlmm.load("nope", {})
    with pytest.raises(PluginLoadError, match="install the package that provides 'acme_meta'"):
        rlmm.load("acme_meta.store:AcmeRLMM", {})
    with pytest.raises(PluginLoadError, match=r"not a subclass of rlmm\.api\.RemoteLogMetadataManager"):
        rlmm.load("rsm_plugins.local:LocalRemoteStorageManager", {})
    with pytest.raises(PluginLoadError, match="has no 'Nope'"):
        rlmm.load("rlmm.file:Nope", {})
