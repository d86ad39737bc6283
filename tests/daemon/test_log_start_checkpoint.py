"""The log dir's ``log-start-offset-checkpoint`` bounds readers and the daemon, without a broker.

A standalone log dir (written by ``rlm.log``, tiered by ``rlm run --once``) gets a checkpoint
entry as Kafka writes it after ``DeleteRecords`` (above the first local segment's base). A reader
configured with the log dir honours it at once; the daemon publishes it and deletes the remote
segments wholly below it; a reader with neither log dir nor broker then honours the published
object. A log dir holding a re-created topic of the same name (another topic id) bounds nothing.
The same flow against a real broker (its own checkpoint, ListOffsets) is in
tests/fetcher_e2e/test_log_start.py.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from fetcher import RemoteFetcher
from rlm.config import load_config
from rlm.daemon.service import Daemon
from rlm.errors import OffsetOutOfRangeError, RemoteResourceNotFoundError
from rlm.log.checkpoints import encode_offset_checkpoint, encode_partition_metadata
from rlm.types import KafkaUuid, TopicPartition
from rsm_plugins import log_start
from tests.daemon.helpers import wait_for
from tests.daemon.test_standalone import cfg_for, run_once, write_partition

TOPIC = "ledger"


def _reader(work: Path, name: str, **extra: object) -> RemoteFetcher:
    return RemoteFetcher.from_config(
        load_config(
            None,
            **{
                "work_dir": str(work.parent / name),
                "storage": {"plugin": "local", "config": {"root": str(work / "remote")}},
                "metadata": {"manager": "file", "config": {"dir": str(work / "metadata")}},
                **extra,
            },
        )
    )


def test_checkpoint_bounds_readers_and_the_daemon(tmp_path: Path) -> None:
    logs, work = tmp_path / "logs", tmp_path / "work"
    write_partition(logs, TOPIC, 0, 200, topic_id=KafkaUuid.random())
    cfg = cfg_for(logs, work)
    run_once(cfg)
    with _reader(work, "before") as f:
        segs = [link.metadata for link in f.plan(TOPIC, 0).segments]
    assert len(segs) >= 4 and segs[0].start_offset == 0
    bound = segs[2].start_offset + 7
    (logs / "log-start-offset-checkpoint").write_bytes(
        encode_offset_checkpoint({TopicPartition(TOPIC, 0): bound})
    )

    with _reader(work, "dir-reader", log_dirs=[str(logs)]) as f:
        ls = f.log_start(TOPIC, 0)
        assert (ls.offset, ls.log_dir, ls.published) == (bound, bound, None)
        with pytest.raises(OffsetOutOfRangeError):
            f.fetch(TOPIC, 0, bound - 1)
        assert f.offset_for_timestamp(TOPIC, 0, -2).offset == bound  # type: ignore[union-attr]

    # the same name, another topic id (deleted and re-created): its checkpoint entry is not ours
    other = tmp_path / "other-logs"
    shutil.copytree(logs, other)
    (other / f"{TOPIC}-0" / "partition.metadata").write_bytes(encode_partition_metadata(KafkaUuid.random()))
    with _reader(work, "other-reader", log_dirs=[str(other)]) as f:
        assert f.log_start(TOPIC, 0).offset == 0

    run_once(cfg)  # standalone: learns the bound from the checkpoint, publishes it, deletes below
    with _reader(work, "bare") as f:
        ls = f.log_start(TOPIC, 0)
        assert (ls.offset, ls.published) == (bound, bound)
        assert f.plan(TOPIC, 0).log_start == bound
        for md in segs[:2]:
            with pytest.raises(RemoteResourceNotFoundError):
                f.rsm.fetch_log_segment(md, 0).close()
        assert {
            m.remote_log_segment_id for m in f.rlmm.list_remote_log_segments(segs[0].topic_id_partition)
        } & {m.remote_log_segment_id for m in segs[:2]} == set()

    # the topic is deleted (standalone: Kafka renames the dir ``<topic>-<p>.<uuid>-delete``): the
    # partition remover deletes the published object with the segments, and the work dir's copy
    tp = segs[0].topic_id_partition
    published = work / "remote" / f"{TOPIC}-0-{tp.topic_id.text}" / log_start.OBJECT_NAME
    remembered = work / "log-start" / f"{TOPIC}-0-{tp.topic_id.text}.json"
    assert published.is_file() and remembered.is_file()
    (logs / f"{TOPIC}-0").rename(logs / f"{TOPIC}-0.{uuid.uuid4().hex}-delete")
    d = Daemon(cfg_for(logs, work, partition_remover_interval_ms=200)).start()
    try:
        wait_for("partition removed", lambda: not any(p.suffix == ".log" for p in published.parent.iterdir()))
        wait_for("published log start removed", lambda: not published.exists() and not remembered.exists())
    finally:
        d.stop(10)
