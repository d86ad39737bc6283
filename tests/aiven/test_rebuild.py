"""``rlm metadata rebuild`` over Aiven's layout: the metadata every manifest embeds rebuilds a
store from the bucket alone, equal to the broker's ``__remote_log_metadata`` (issue 26, item 4),
and the read faces answer from it exactly what the broker's consumer read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlm.cli import main as cli_main
from rlm.types import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.file import FileRemoteLogMetadataManager
from tests.aiven.helpers import VARIANTS, expected, finished_segments, write_config
from tests.aiven.test_read_faces import _cli_fetch, _partitions


def _stored(metadata_dir: Path, variant: str) -> list[RemoteLogSegmentMetadata]:
    store = FileRemoteLogMetadataManager()
    store.configure({"dir": str(metadata_dir)})
    try:
        tps = {md.topic_id_partition for md in _in_bucket(variant)}
        return sorted((_comparable(md) for tp in tps for md in store.list_remote_log_segments(tp)),
                      key=_order)
    finally:
        store.close()


def _in_bucket(variant: str) -> list[RemoteLogSegmentMetadata]:
    """The fixture's segments whose objects the repository keeps (variant a keeps one topic)."""
    present = set(_partitions(variant))
    return [md for md in finished_segments(variant)
            if (md.topic_id_partition.topic, md.topic_id_partition.partition) in present]


def _order(md: RemoteLogSegmentMetadata) -> tuple[str, int, int]:
    return md.topic_id_partition.topic, md.topic_id_partition.partition, md.start_offset


def _comparable(md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    """What the manifest embeds: everything but the state and the plugin's custom metadata."""
    return replace(md, custom_metadata=None, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


@pytest.mark.parametrize("variant", VARIANTS)
def test_manifests_rebuild_the_metadata(variant: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, variant, tmp_path / "metadata")
    capsys.readouterr()
    assert cli_main(["metadata", "rebuild", "--config", str(config), "--json"]) == 0  # dry run
    json.loads(capsys.readouterr().out)
    assert not (tmp_path / "metadata").exists() or not any((tmp_path / "metadata").iterdir())
    assert cli_main(["metadata", "rebuild", "--config", str(config), "--json", "--execute"]) == 0
    json.loads(capsys.readouterr().out)
    want = sorted((_comparable(md) for md in _in_bucket(variant)), key=_order)
    assert len(want) >= 3
    assert _stored(tmp_path / "metadata", variant) == want
    # the read faces answer from the rebuilt store what the broker's consumer read
    for level in ("read_uncommitted", "read_committed"):
        rows = []
        for topic, partition in _partitions(variant):
            rows += _cli_fetch(config, topic, partition, level, capsys)
        key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
        assert sorted(rows, key=key) == sorted(expected(variant, level), key=key)
    # a rerun adds nothing
    assert cli_main(["metadata", "rebuild", "--config", str(config), "--json", "--execute"]) == 0
    capsys.readouterr()
    assert _stored(tmp_path / "metadata", variant) == want
