"""The Aiven fixture (``tests/fixtures/aiven``, see its ``build.py``): paths, metadata loading,
configurations written the way an operator pastes the broker's lines."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from rlm.types import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from rlmm.api import RemoteLogMetadataManager
from rlmm.serde import deserialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "aiven"
VARIANTS = ("a", "b", "c")
AIVEN_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"


def variant_dir(variant: str) -> Path:
    return FIXTURES / variant


def metadata_records(variant: str) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(metadata-topic partition, key, value) of every raw ``__remote_log_metadata`` record."""
    with open(variant_dir(variant) / "remote_log_metadata.jsonl") as f:
        for line in f:
            r = json.loads(line)
            key = base64.b64decode(r["key"]) if r.get("key") else None
            yield int(r["partition"]), key, base64.b64decode(r["value"])


def load_metadata(variant: str, store: RemoteLogMetadataManager) -> None:
    """Apply every raw record to ``store``, in each metadata-topic partition's order."""
    for _, _, value in metadata_records(variant):
        md = deserialize(value)
        if isinstance(md, RemoteLogSegmentMetadata):
            store.add_remote_log_segment_metadata(md)
        elif isinstance(md, RemoteLogSegmentMetadataUpdate):
            store.update_remote_log_segment_metadata(md)
        elif isinstance(md, RemotePartitionDeleteMetadata):
            store.put_remote_partition_delete_metadata(md)


def finished_segments(variant: str) -> list[RemoteLogSegmentMetadata]:
    """Segment metadata records of the fixture (start records; sizes and ids are what reads need)."""
    out = []
    for _, _, value in metadata_records(variant):
        md = deserialize(value)
        if isinstance(md, RemoteLogSegmentMetadata):
            out.append(md)
    return out


def broker_rsm_lines(variant: str) -> dict[str, str]:
    """The broker's ``remote.log.storage.manager.class.name`` and ``rsm.config.*`` lines, with the
    paths of the machine that made the fixture replaced by this checkout's."""
    root = variant_dir(variant)
    out: dict[str, str] = {}
    for line in (root / "server.properties").read_text().splitlines():
        if "=" not in line or line.startswith("#"):
            continue
        k, v = line.split("=", 1)
        if k.startswith("rsm.config.") or k == "remote.log.storage.manager.class.name":
            out[k] = v
    out["rsm.config.storage.root"] = str(root / "storage")
    for k in list(out):
        if k.endswith(".private.key.file"):
            out[k] = str(root / "keys" / "private.pem")
        elif k.endswith(".public.key.file"):
            out[k] = str(root / "keys" / "public.pem")
    return out


def plugin_block(variant: str) -> dict[str, str]:
    """The storage plugin's block as Kafka hands it to the plugin (``rsm.config.`` stripped)."""
    return {k.removeprefix("rsm.config."): v for k, v in broker_rsm_lines(variant).items()
            if k.startswith("rsm.config.")}


def write_config(tmp: Path, variant: str, metadata_dir: Path, **extra: Any) -> Path:
    """An ``rlm.yaml`` for the read side: the broker's lines pasted as they are, a file store."""
    doc: dict[str, Any] = {
        "work_dir": str(tmp / "work"),
        **broker_rsm_lines(variant),
        "metadata": {"manager": "file", "config": {"dir": str(metadata_dir)}},
        **extra,
    }
    path = tmp / "rlm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def expected(variant: str, level: str) -> list[dict[str, Any]]:
    with gzip.open(variant_dir(variant) / f"expected.{level}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def local_files(variant: str) -> dict[str, dict[str, dict[str, Any]]]:
    data: dict[str, dict[str, dict[str, Any]]] = json.loads(
        (variant_dir(variant) / "local_segment_files.json").read_text())
    return data


def topics_in(variant: str) -> set[str]:
    return {p.name[:-23] for p in (variant_dir(variant) / "storage").iterdir()}  # "-" + 22-char id
