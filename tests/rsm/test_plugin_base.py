"""What ``RemoteStorageManager`` owns for every plugin: config parsing, the configure() guard, pickling."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from pydantic import Field, SecretStr

import rsm_plugins
from rsm_plugins.api import (
    ConfigError,
    IndexType,
    LogSegmentData,
    PluginConfig,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    RemoteStorageManager,
)
from rsm_plugins.local import LocalRemoteStorageManager
from rsm_plugins.s3 import S3RemoteStorageManager

SECRET = "s3cr3t-Value-7f1c"


class TinyConfig(PluginConfig):
    endpoint_url: str = Field(min_length=1)
    parallelism: int = Field(4, ge=1)
    token: str | None = None


class TinyRSM(RemoteStorageManager[TinyConfig]):
    """A plugin written the way the base class intends: a model, a hook, transient runtime state."""

    plugin_name = "tiny"
    config_model = TinyConfig
    transient_attributes = frozenset({"_lock", "client"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.client: object | None = None
        self.configured_times = 0

    def on_configure(self, config: TinyConfig) -> None:
        self.configured_times += 1
        self.client = object()  # stands for an SDK client: not picklable in real life

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData) -> None:
        raise NotImplementedError

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        raise NotImplementedError

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        raise NotImplementedError

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise NotImplementedError


def test_every_problem_reported_at_once_under_the_key_as_written() -> None:
    rsm = TinyRSM()
    with pytest.raises(ConfigError) as e:
        rsm.configure({"endpoint.url": "", "parallelism": 0, "colour": "blue", "secret-thing": SECRET})
    msg = str(e.value)
    for key in ("endpoint.url", "parallelism", "colour", "secret-thing"):  # all at once, as written
        assert key in msg, msg
    assert msg.count("unknown key") == 2, msg
    assert "endpoint_url" not in msg and SECRET not in msg
    with pytest.raises(RemoteStorageError, match=r"tiny storage plugin used before configure\(\)"):
        _ = rsm.config


def test_builtin_plugin_reports_all_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        rsm_plugins.load(
            "s3", {"bucket": "x", "part.size": 1, "upload-concurrency": 0, "secret_access_key": SECRET}
        )
    msg = str(e.value)
    assert "bucket" in msg and "part.size" in msg and "upload-concurrency" in msg
    assert "part_size" not in msg and "upload_concurrency" not in msg and SECRET not in msg


def test_broker_id_accepted_and_secret_values_unwrapped() -> None:
    rsm = TinyRSM()
    rsm.configure({"endpoint.url": "http://x", "broker.id": 3, "token": SecretStr(SECRET)})
    assert rsm.config.broker_id == 3 and rsm.config.token == SECRET


def test_guard_before_configure(tmp_path: Path) -> None:
    local = LocalRemoteStorageManager()
    with pytest.raises(RemoteStorageError, match=r"local storage plugin used before configure\(\)"):
        _ = local.root
    local.configure({"root": str(tmp_path)})
    assert local.root == tmp_path


def test_failed_on_configure_leaves_the_plugin_unconfigured(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    local = LocalRemoteStorageManager()
    with pytest.raises(ConfigError, match="cannot create root"):
        local.configure({"root": str(blocker / "sub")})
    with pytest.raises(RemoteStorageError, match="before configure"):
        _ = local.config


def test_pickling_drops_transient_state_and_keeps_config() -> None:
    rsm = TinyRSM()
    rsm.configure({"endpoint.url": "http://x", "parallelism": 2})
    rsm.configured_times = 5
    clone: Any = pickle.loads(pickle.dumps(rsm))
    assert type(clone) is TinyRSM and clone.config == rsm.config
    assert clone.configured_times == 5  # ordinary attributes travel
    assert clone.client is None and clone._lock is not rsm._lock  # transient ones are made afresh


def test_builtin_s3_pickles_without_its_client() -> None:
    rsm = rsm_plugins.load(
        "s3", {"bucket": "abc", "endpoint.url": "http://127.0.0.1:9", "secret_access_key": SECRET}
    )
    assert isinstance(rsm, S3RemoteStorageManager)
    _ = rsm.client  # cached client and lock exist now
    data = pickle.dumps(rsm)
    clone: Any = pickle.loads(data)
    assert clone._client is None and clone.config.bucket == "abc"
    assert clone.config.secret_access_key.get_secret_value() == SECRET
    assert SECRET not in repr(clone.config)
    rsm.close()


def test_write_source_copies_data_or_a_file_and_checksums_on_the_way(tmp_path: Path) -> None:
    """``write_source``: in-memory bytes or a file (in pieces, or by the plugin's own ``copy``);
    the CRC-32C is of exactly the bytes written."""
    import io

    from rsm_plugins.integrity import Crc32c, crc32c
    from rsm_plugins.layout import SegmentFileType, SourceFile

    rsm = TinyRSM()
    body = bytes(range(256)) * (40 << 10)  # 10 MiB: more than one piece
    path = tmp_path / "seg.log"
    path.write_bytes(body)
    seg = SegmentFileType.SEGMENT
    for src in (SourceFile(seg, data=body), SourceFile(seg, path=path)):
        out, crc = io.BytesIO(), Crc32c()
        rsm.write_source(src, out, crc)
        assert out.getvalue() == body and (crc.size, crc.value) == (len(body), crc32c(body))
    declined, taken = io.BytesIO(), io.BytesIO()
    rsm.write_source(SourceFile(seg, path=path), declined, Crc32c(), copy=lambda inp: False)
    assert declined.getvalue() == body  # the plugin's copy declined: the pieces
    rsm.write_source(SourceFile(seg, path=path), taken, Crc32c(), copy=lambda inp: True)
    assert taken.getvalue() == b""  # the plugin's copy did it (here: nothing)
    with pytest.raises(ValueError, match="neither data nor a path"):
        rsm.write_source(SourceFile(seg), io.BytesIO(), Crc32c())
