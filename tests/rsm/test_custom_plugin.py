"""A third-party plugin: ``examples/custom_rsm`` is pip-installed into the venv, found by its entry
point name, and passes the same contract kit as the built-ins."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rsm_plugins
from rsm_plugins.api import ConfigError, RemoteStorageError, RemoteStorageManager
from rsm_plugins.testing import RemoteStorageManagerContract
from tests.examples import install_example


@pytest.fixture(scope="module")
def installed_example() -> str:
    install_example("custom_rsm", "custom-rsm-example")
    return "example-memory"


def test_found_by_entry_point(installed_example: str) -> None:
    assert rsm_plugins.available()[installed_example] == "custom_rsm:MemoryRemoteStorageManager"
    cls = rsm_plugins.resolve(installed_example)
    assert cls.__module__ == "custom_rsm" and issubclass(cls, RemoteStorageManager)
    assert Path(sys.modules["custom_rsm"].__file__ or "").is_relative_to(Path(sys.prefix))


class TestCustomPluginContract(RemoteStorageManagerContract):
    records_checksums = False  # the example returns no custom metadata
    stores_log_start = False  # nor implements the optional published log start offset

    @pytest.fixture
    def rsm(self, installed_example: str, request: pytest.FixtureRequest) -> Iterator[RemoteStorageManager]:
        plugin = rsm_plugins.load(installed_example, {"namespace": request.node.nodeid})
        yield plugin
        plugin.close()


def test_config_errors_all_at_once(installed_example: str) -> None:
    with pytest.raises(ConfigError) as e:
        rsm_plugins.load(installed_example, {"namespace": "", "max.segments": 0, "colour": "red"})
    msg = str(e.value)
    assert "namespace" in msg and "max.segments" in msg and "max_segments" not in msg
    assert "colour" in msg and "unknown key" in msg


def test_guard_and_pickling_come_from_the_base_class(installed_example: str) -> None:
    cls = rsm_plugins.resolve(installed_example)
    with pytest.raises(RemoteStorageError, match=r"example-memory storage plugin used before configure\(\)"):
        _ = cls().config
    plugin = rsm_plugins.load(installed_example, {"namespace": "pickled", "broker.id": 7})
    clone = pickle.loads(pickle.dumps(plugin))
    assert type(clone) is cls and clone.config == plugin.config
