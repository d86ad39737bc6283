"""Topic names read from metadata or storage never lead a path or key out of its root.

Kafka allows only ``[a-zA-Z0-9._-]`` (1-249 characters); anything else is refused with
``InvalidNameError`` before any file is created, read or deleted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import rsm_plugins
from rlm.daemon.context import EpochHistory
from rlm.errors import ConfigError, InvalidNameError
from rlm.types import RemoteLogSegmentMetadata, check_topic_name
from rsm_plugins.layout import SegmentFileType, kafka_relative_path, s3_key
from rsm_plugins.local import LocalRemoteStorageManager
from rsm_plugins.testing import SegmentFactory

EVIL = ["../x", "..", ".", "a/b", "/tmp/rlm-escape-probe", "a\0b", "", "x" * 250, "a\\b", "é"]


def _renamed(md: RemoteLogSegmentMetadata, topic: str) -> RemoteLogSegmentMetadata:
    seg_id = md.remote_log_segment_id
    tip = dataclasses.replace(seg_id.topic_id_partition, topic=topic)
    return dataclasses.replace(md, remote_log_segment_id=dataclasses.replace(seg_id, topic_id_partition=tip))


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.mark.parametrize("name", ["orders", "__consumer_offsets", "a.b_c-D9", "x" * 249, "..."])
def test_legal_names_pass(name: str) -> None:
    assert check_topic_name(name) == name


@pytest.mark.parametrize("name", EVIL, ids=repr)
def test_illegal_names_are_typed_errors(name: str) -> None:
    with pytest.raises(InvalidNameError, match="illegal topic name") as info:
        check_topic_name(name)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", EVIL, ids=repr)
def test_local_storage_touches_nothing_outside_its_root(tmp_path: Path, name: str) -> None:
    rsm = rsm_plugins.load("local", {"root": str(tmp_path / "remote")})
    assert isinstance(rsm, LocalRemoteStorageManager)
    seg = SegmentFactory(tmp_path / "src").make(2000)
    md = _renamed(seg.metadata, name)
    before = _tree(tmp_path)
    with pytest.raises(InvalidNameError):
        rsm.copy_log_segment_data(md, seg.data)
    with pytest.raises(InvalidNameError):
        rsm.delete_log_segment_data(md)
    with pytest.raises(InvalidNameError):
        kafka_relative_path(md, SegmentFileType.SEGMENT)
    with pytest.raises(InvalidNameError):
        s3_key("prefix/", md, SegmentFileType.SEGMENT)
    assert _tree(tmp_path) == before
    assert not Path("/tmp/rlm-escape-probe-0-" + md.topic_id_partition.topic_id.text).exists()


@pytest.mark.parametrize("name", EVIL, ids=repr)
def test_daemon_work_dir_paths_refuse_illegal_names(tmp_path: Path, name: str) -> None:
    seg = SegmentFactory(tmp_path / "src").make(100)
    tip = _renamed(seg.metadata, name).topic_id_partition
    work = tmp_path / "work"
    work.mkdir()
    history = EpochHistory(work)
    with pytest.raises(InvalidNameError):
        history.merge(tip, [(0, 0)])
    assert not [p for p in _tree(tmp_path) if p.is_file() and (tmp_path / "src") not in p.parents]
