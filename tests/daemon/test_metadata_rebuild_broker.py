"""``rlm metadata rebuild`` beside a real broker: SeaweedFS (s3 plugin) + the topic metadata store.

A topic with idempotent records and committed and aborted transactions is tiered by the daemon
into a metadata topic; that store is then "lost" (the rebuild writes into a new, empty metadata
topic) and rebuilt from the bucket alone — first from the descriptors, then, with every descriptor
deleted from the bucket, from the segments' own files. The read core must answer the same from
each store as from the original: the segments chosen, every record, a read_committed fetch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from fetcher import RemoteFetcher
from rlm.cli import main
from rlm.config import load_config
from rlm.daemon.service import Daemon
from tests.daemon.helpers import create_topic, produce, produce_txn, s3_storage, topic_rlmm
from tests.daemon.rebuild_helpers import read_path
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.slow]


def write_config(path: Path, kafka: Any, storage: dict[str, Any], topic: str, meta_topic: str) -> Path:
    work = path.parent
    metadata = topic_rlmm(kafka.bootstrap, work, partitions=1)
    metadata["config"]["remote.log.metadata.topic.name"] = meta_topic
    doc = {"log_dirs": [str(kafka.log_dir)], "work_dir": str(work), "bootstrap_servers": kafka.bootstrap,
           "storage": storage, "metadata": metadata, "http": {"enabled": False},
           "topics": [{"pattern": topic, "remote.storage.enable": True}]}
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))  # YAML is a superset of JSON
    return path


@pytest.fixture
def readers() -> Iterator[Any]:
    opened: list[RemoteFetcher] = []

    def open_(cfg_file: Path) -> RemoteFetcher:
        f = RemoteFetcher.from_config(load_config(cfg_file))
        opened.append(f)
        return f

    yield open_
    for f in opened:
        f.close()


def rebuild(cfg_file: Path, topic: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["metadata", "rebuild", "--config", str(cfg_file), "--topic", topic,
                 "--execute", "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_rebuilt_topic_store_reads_like_the_original(kafka: Any, seaweedfs: Any, seaweedfs_bucket: str,
                                                     unique_topic: str, tmp_path: Path, readers: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    topic, bs = unique_topic, kafka.bootstrap
    create_topic(bs, topic)  # 1 MiB segments (the broker's minimum)
    produce(bs, topic, 1600, size=1000)
    produce_txn(bs, topic, f"{topic}-c", 300, commit=True, size=1000)
    produce_txn(bs, topic, f"{topic}-a", 300, commit=False, size=1000)
    produce(bs, topic, 1600, size=1000)
    storage = s3_storage(seaweedfs, seaweedfs_bucket)
    meta = f"rlm_md_{topic}"
    orig = write_config(tmp_path / "orig" / "rlm.yaml", kafka, storage, topic, meta)
    d = Daemon(load_config(orig), once=True).start()
    assert d.run_once() == 0
    assert d.stop()
    want = read_path(readers(orig), topic)
    assert len(want[0][0]) >= 3 and want[1][0], "several segments, records"

    rebuilt = write_config(tmp_path / "rebuilt" / "rlm.yaml", kafka, storage, topic, f"{meta}_rebuilt")
    out = rebuild(rebuilt, topic, capsys)
    (part,) = out["partitions"]
    assert part["written"] == len(want[0][0]) and not part["skip"] and not part["unusable"]
    assert {s["source"] for s in part["keep"]} == {"descriptor"}
    assert read_path(readers(rebuilt), topic) == want
    again = rebuild(rebuilt, topic, capsys)["partitions"][0]  # idempotent on the topic store too
    assert again["written"] == 0 and again["already_present"] == len(want[0][0])
    capsys.readouterr()
    assert main(["verify", "--config", str(rebuilt), "--topic", topic]) == 0, capsys.readouterr().out

    s3 = boto3.client("s3", endpoint_url=seaweedfs.endpoint_url, region_name=REGION,
                      aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=seaweedfs_bucket)
            for o in page.get("Contents", []) if o["Key"].endswith(".rlm_descriptor")]
    assert len(keys) == len(want[0][0])
    for key in keys:
        s3.delete_object(Bucket=seaweedfs_bucket, Key=key)
    from_files = write_config(tmp_path / "files" / "rlm.yaml", kafka, storage, topic, f"{meta}_files")
    out = rebuild(from_files, topic, capsys)
    assert {s["source"] for s in out["partitions"][0]["keep"]} == {"files"}
    assert read_path(readers(from_files), topic) == want
