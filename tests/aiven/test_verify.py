"""``rlm verify`` over Aiven's layout: clean on the real objects (also ``--deep``: every batch CRC
of every decrypted, decompressed segment); a tampered chunk, bytes appended to an object, a
manifest that names another segment are reported, each under a stable kind."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from rlm.cli import main as cli_main
from rlmm.file import FileRemoteLogMetadataManager
from tests.aiven.helpers import VARIANTS, load_metadata, topics_in, variant_dir, write_config


def _verify(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    capsys.readouterr()
    code = cli_main(["verify", "--config", str(config), "--json", *extra])
    out, _ = capsys.readouterr()
    return code, json.loads(out[out.index("{"):])


@pytest.mark.parametrize("variant", VARIANTS)
def test_clean_on_the_real_objects(variant: str, aiven_configs: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    segments = 0
    for topic in sorted(topics_in(variant)):  # variant a's fixture keeps one topic's objects
        code, report = _verify(aiven_configs[variant], capsys, "--deep", "--topic", topic)
        assert report["problems"] == 0, report
        assert code == 0
        segments += sum(p["segments"] for p in report["partitions"])
    assert segments == (3 if variant == "a" else 12)


def _private(tmp: Path, variant: str) -> tuple[Path, Path]:
    root = tmp / "storage"
    shutil.copytree(variant_dir(variant) / "storage", root)
    store = FileRemoteLogMetadataManager()
    store.configure({"dir": str(tmp / "metadata")})
    load_metadata(variant, store)
    store.close()
    cfg = write_config(tmp, variant, tmp / "metadata", **{"rsm.config.storage.root": str(root)})
    return cfg, root


def _largest_log(root: Path) -> Path:
    return max(root.rglob("*.log"), key=lambda p: p.stat().st_size)


def test_tampered_chunk_and_appended_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, root = _private(tmp_path, "c")
    log = _largest_log(root)
    data = bytearray(log.read_bytes())
    data[70_000] ^= 0xFF
    log.write_bytes(bytes(data))
    other = sorted(root.rglob("*.indexes"))[0]
    other.write_bytes(other.read_bytes() + b"junk")
    code, report = _verify(cfg, capsys)
    assert code == 1
    problems = [p for part in report["partitions"] for p in part["problems"]]
    corrupt = [p for p in problems if p["kind"] == "corrupt_object"]
    assert len(corrupt) == 1 and "fails AES-GCM" in corrupt[0]["message"]
    assert log.name.removesuffix(".log") in corrupt[0]["message"]
    mismatch = [p for p in problems if p["kind"] == "layout_mismatch"]
    assert len(mismatch) == 1 and "the manifest's index slices end at" in mismatch[0]["message"]


def test_manifest_of_another_segment_and_missing_object(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, root = _private(tmp_path, "b")
    manifests = sorted(root.rglob("*.rsm-manifest"))
    doc = json.loads(manifests[0].read_text())
    doc["remoteLogSegmentMetadata"]["remoteLogSegmentId"]["id"] = "AAAAAAAAAAAAAAAAAAAAAA"
    manifests[0].write_text(json.dumps(doc))
    manifests[1].with_suffix(".indexes").unlink()
    code, report = _verify(cfg, capsys)
    assert code == 1
    kinds = sorted(p["kind"] for part in report["partitions"] for p in part["problems"])
    assert "layout_mismatch" in kinds and "missing_object" in kinds


def test_orphan_objects_are_listed_and_never_repaired(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg, root = _private(tmp_path, "b")
    log = _largest_log(root)
    stray = log.with_name(log.name[:21] + "ZZZZZZZZZZZZZZZZZZZZZZ.log")
    shutil.copy(log, stray)
    old = time.time() - 7 * 86400
    os.utime(stray, (old, old))
    code, report = _verify(cfg, capsys)
    assert code == 1
    orphans = [p for part in report["partitions"] for p in part["problems"] if p["kind"] == "orphan_object"]
    assert [o["segment_id"] for o in orphans] == ["ZZZZZZZZZZZZZZZZZZZZZZ"]
    assert all(part["objects"] is not None for part in report["partitions"])
    capsys.readouterr()
    assert cli_main(["verify", "--config", str(cfg), "--repair", "--execute"]) == 3
    assert "read-only" in capsys.readouterr().err
    assert stray.exists()
