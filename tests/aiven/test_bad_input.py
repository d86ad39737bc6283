"""Damaged or foreign input is a typed error naming what is wrong, never wrong records: a tampered
chunk or index (GCM tag), the wrong private key, a key id that is not configured, a manifest of
an unknown version, a chunk index that disagrees with the object, a chunk that is not zstd."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
from pathlib import Path

import pytest
import zstandard

import rsm_plugins
from fetcher.reader import ByteRateLimiter, ReadStats, SegmentReader
from rlm.cli import main as cli_main
from rlm.errors import (
    ChunkIntegrityError,
    ConfigError,
    DataKeyError,
    ReadOnlyStorageError,
    RemoteObjectFormatError,
    RemoteSegmentIncompleteError,
)
from rlm.types import IndexType, RemoteLogSegmentMetadata
from rlmm.file import FileRemoteLogMetadataManager
from rsm_plugins.aiven import AivenRemoteStorageManager
from tests.aiven.helpers import AIVEN_CLASS, finished_segments, load_metadata, plugin_block, write_config

CHUNK = 65536


def _copy(variant: str, tmp: Path) -> tuple[AivenRemoteStorageManager, RemoteLogSegmentMetadata, Path]:
    """A private copy of a variant's storage; its plugin, its largest segment and that segment's
    objects' common path (without suffix)."""
    root = tmp / "storage"
    shutil.copytree(Path(plugin_block(variant)["storage.root"]), root)
    block = {**plugin_block(variant), "storage.root": str(root)}
    rsm = rsm_plugins.load(AIVEN_CLASS, block)
    assert isinstance(rsm, AivenRemoteStorageManager)
    topics = {p.name[:-23] for p in root.iterdir()}
    md = max((m for m in finished_segments(variant) if m.topic_id_partition.topic in topics),
             key=lambda m: m.segment_size_in_bytes)
    base = root / rsm.object_key(md).log.removesuffix(".log")
    return rsm, md, base


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


def _manifest(base: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(base.with_suffix(".rsm-manifest").read_text())


def _write_manifest(base: Path, doc: dict) -> None:  # type: ignore[type-arg]
    base.with_suffix(".rsm-manifest").write_text(json.dumps(doc))


def test_tampered_encrypted_chunk_names_object_and_chunk(tmp_path: Path) -> None:
    rsm, md, base = _copy("c", tmp_path)
    ci = rsm.open_segment(md).manifest.chunk_index
    _flip(base.with_suffix(".log"), int(ci.starts[2]) + 40)
    with rsm.fetch_log_segment(md, 0, CHUNK * 2 - 1) as f:  # chunks 0 and 1 are intact
        assert len(f.read()) == CHUNK * 2
    with pytest.raises(ChunkIntegrityError, match="chunk 2 fails AES-GCM") as e:
        rsm.fetch_log_segment(md, CHUNK * 2 + 10, CHUNK * 2 + 20)
    assert e.value.chunk == 2
    assert e.value.object_key.endswith(base.name + ".log")
    assert not e.value.retriable


def test_tampered_encrypted_index(tmp_path: Path) -> None:
    rsm, md, base = _copy("c", tmp_path)
    piece = rsm.open_segment(md).manifest.index_slice(IndexType.TIMESTAMP)
    assert piece is not None
    _flip(base.with_suffix(".indexes"), piece.position + 20)
    with pytest.raises(ChunkIntegrityError, match="TIMESTAMP index"):
        rsm.fetch_index(md, IndexType.TIMESTAMP)
    rsm.fetch_index(md, IndexType.OFFSET).close()  # its neighbour is intact


def test_tampered_chunk_through_the_cli_fails_without_wrong_records(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rsm, md, base = _copy("c", tmp_path)
    ci = rsm.open_segment(md).manifest.chunk_index
    _flip(base.with_suffix(".log"), int(ci.starts[1]) + 100)
    store = FileRemoteLogMetadataManager()
    store.configure({"dir": str(tmp_path / "metadata")})
    load_metadata("c", store)
    store.close()
    cfg = write_config(tmp_path, "c", tmp_path / "metadata",
                       **{"rsm.config.storage.root": str(tmp_path / "storage")})
    tp = md.topic_id_partition
    code = cli_main(["fetch", "--config", str(cfg), "--topic", tp.topic, "--partition", str(tp.partition),
                     "--offset", str(md.start_offset), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "chunk 1 fails AES-GCM" in err and base.name in err
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert all(r["offset"] >= md.start_offset for r in records)


def test_wrong_private_key(tmp_path: Path) -> None:
    from Crypto.PublicKey import RSA

    other = tmp_path / "other.pem"
    other.write_bytes(RSA.generate(2048).export_key(pkcs=8))
    block = {**plugin_block("c"), "encryption.key.pairs.k1.private.key.file": str(other)}
    rsm = rsm_plugins.load(AIVEN_CLASS, block)
    md = finished_segments("c")[0]
    with pytest.raises(DataKeyError, match="does not unwrap with key pair 'k1'"):
        rsm.fetch_log_segment(md, 0, 10)


def test_key_id_not_configured(tmp_path: Path) -> None:
    block = {k.replace(".k1.", ".k2."): v for k, v in plugin_block("c").items()}
    block["encryption.key.pair.id"] = "k2"
    block["encryption.key.pairs"] = "k2"
    rsm = rsm_plugins.load(AIVEN_CLASS, block)
    with pytest.raises(DataKeyError, match=r"key pair 'k1', which is not configured.*k2"):
        rsm.fetch_index(finished_segments("c")[0], IndexType.OFFSET)


def test_encrypted_segment_without_any_key(tmp_path: Path) -> None:
    block = {k: v for k, v in plugin_block("c").items() if not k.startswith("encryption")}
    rsm = rsm_plugins.load(AIVEN_CLASS, block)
    with pytest.raises(DataKeyError, match="no key pairs are configured"):
        rsm.fetch_log_segment(finished_segments("c")[0], 0)


def test_manifest_of_unknown_version(tmp_path: Path) -> None:
    rsm, md, base = _copy("b", tmp_path)
    doc = _manifest(base)
    _write_manifest(base, {**doc, "version": "2"})
    with pytest.raises(RemoteObjectFormatError, match="manifest version '2' is not supported"):
        rsm.fetch_log_segment(md, 0)


def _sizes_frame(sizes: list[int]) -> str:
    raw = len(sizes).to_bytes(4, "big") + b"".join(s.to_bytes(4, "big") for s in sizes[:1])
    if len(sizes) > 1:
        base = min(sizes[:-1])
        raw = (len(sizes).to_bytes(4, "big") + base.to_bytes(4, "big") + bytes([4])
               + b"".join((s - base).to_bytes(4, "big") for s in sizes[:-1]) + sizes[-1].to_bytes(4, "big"))
    return base64.b64encode(zstandard.ZstdCompressor(write_content_size=True).compress(raw)).decode()


def test_chunk_index_larger_than_the_object(tmp_path: Path) -> None:
    rsm, md, base = _copy("b", tmp_path)
    sizes = [int(x) for x in rsm.open_segment(md).manifest.chunk_index.starts]
    sizes = [b - a for a, b in itertools.pairwise(sizes)]
    doc = _manifest(base)
    doc["chunkIndex"]["transformedChunks"] = _sizes_frame([*sizes[:-1], sizes[-1] + 1000])
    _write_manifest(base, doc)
    rsm2 = rsm_plugins.load(AIVEN_CLASS, {**plugin_block("b"), "storage.root": str(tmp_path / "storage")})
    with pytest.raises(RemoteObjectFormatError, match=r"shorter than the manifest's chunk index|disagree"):
        rsm2.fetch_log_segment(md, md.segment_size_in_bytes - 10)


def test_chunk_index_shifted_sizes_are_not_decoded_as_records(tmp_path: Path) -> None:
    rsm, md, base = _copy("b", tmp_path)
    starts = [int(x) for x in rsm.open_segment(md).manifest.chunk_index.starts]
    sizes = [b - a for a, b in itertools.pairwise(starts)]
    doc = _manifest(base)
    doc["chunkIndex"]["transformedChunks"] = _sizes_frame([sizes[0] + 7, sizes[1] - 7, *sizes[2:]])
    _write_manifest(base, doc)
    rsm2 = rsm_plugins.load(AIVEN_CLASS, {**plugin_block("b"), "storage.root": str(tmp_path / "storage")})
    with pytest.raises(RemoteObjectFormatError, match="chunk 0"):
        rsm2.fetch_log_segment(md, 0, 100)


def test_chunk_count_disagrees_with_file_size(tmp_path: Path) -> None:
    rsm, md, base = _copy("b", tmp_path)
    doc = _manifest(base)
    doc["chunkIndex"]["transformedChunks"] = _sizes_frame([100, 100])
    _write_manifest(base, doc)
    with pytest.raises(RemoteObjectFormatError, match="lists 2 chunks"):
        rsm.fetch_log_segment(md, 0)


def test_truncated_plain_object(tmp_path: Path) -> None:
    rsm, md, base = _copy("a", tmp_path)
    log = base.with_suffix(".log")
    log.write_bytes(log.read_bytes()[:-500])
    size = md.segment_size_in_bytes
    with pytest.raises(RemoteObjectFormatError, match="shorter than the manifest"):
        rsm.fetch_log_segment(md, size - 100, size - 1)
    reader = SegmentReader(rsm, chunk_bytes=CHUNK, cache_bytes=0, read_ahead_chunks=0, parallel_gets=1,
                           limiter=ByteRateLimiter(2**62), stats=ReadStats())
    with pytest.raises(RemoteSegmentIncompleteError, match="expected 1000"):
        reader.get_range(md, size - 1000, size)  # the read core never takes a short read for the range
    reader.close()


def test_manifest_size_disagrees_with_metadata(tmp_path: Path) -> None:
    rsm, md, base = _copy("a", tmp_path)
    doc = _manifest(base)
    doc["chunkIndex"]["originalFileSize"] += 1
    _write_manifest(base, doc)
    with pytest.raises(RemoteObjectFormatError, match="metadata says"):
        rsm.fetch_log_segment(md, 0)


def test_corrupt_zstd_chunk(tmp_path: Path) -> None:
    rsm, md, base = _copy("b", tmp_path)
    ci = rsm.open_segment(md).manifest.chunk_index
    _flip(base.with_suffix(".log"), int(ci.starts[1]) + 2)  # inside the zstd frame header
    with pytest.raises(RemoteObjectFormatError, match="chunk 1"):
        rsm.fetch_log_segment(md, CHUNK, CHUNK + 10)


def test_writes_are_refused(tmp_path: Path) -> None:
    rsm, md, _ = _copy("a", tmp_path)
    with pytest.raises(ReadOnlyStorageError, match="read-only"):
        rsm.delete_log_segment_data(md)
    with pytest.raises(ReadOnlyStorageError, match="read-only"):
        rsm.copy_log_segment_data(md, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("storage.backend.class", "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage", "not supported"),
        ("storage.s3.bucket.name", "b", "storage.s3.bucket.name not supported with"),
        ("segment.format", "iceberg", "segment.format='iceberg' is not supported"),
        ("fetch.thread.pool.size", "4", "unknown key 'fetch.thread.pool.size'"),
        ("encryption.key.pairs", "k1,k9", "lists k9 without a private.key.file"),
    ],
)
def test_unsupported_settings_are_named(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rsm_plugins.load(AIVEN_CLASS, {**plugin_block("c"), key: value})


def test_write_side_settings_are_accepted() -> None:
    rsm_plugins.load(AIVEN_CLASS, {**plugin_block("b"), "compression.heuristic.enabled": "true",
                                   "upload.rate.limit.bytes.per.second": "1000000",
                                   "fetch.chunk.cache.class": "x",
                                   "custom.metadata.fields.include": "REMOTE_SIZE"})


def test_rlm_run_refuses_an_aiven_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, "a", tmp_path / "metadata", log_dirs=[str(tmp_path / "logs")])
    (tmp_path / "logs").mkdir()
    before = sorted(p.name for p in Path(plugin_block("a")["storage.root"]).rglob("*"))
    code = cli_main(["run", "--config", str(cfg), "--once"])
    _, err = capsys.readouterr()
    assert code == 3
    assert "read-only" in err and "never copies" in err
    assert sorted(p.name for p in Path(plugin_block("a")["storage.root"]).rglob("*")) == before


def test_several_key_pairs_select_by_id(tmp_path: Path) -> None:
    from Crypto.PublicKey import RSA

    newer = tmp_path / "k2.pem"
    newer.write_bytes(RSA.generate(2048).export_key(pkcs=8))
    block = {**plugin_block("c"), "encryption.key.pair.id": "k2", "encryption.key.pairs": "k1,k2",
             "encryption.key.pairs.k2.private.key.file": str(newer)}
    rsm = rsm_plugins.load(AIVEN_CLASS, block)  # k2 is active now; old segments name k1
    md = finished_segments("c")[0]
    with rsm.fetch_log_segment(md, 0, 99) as f:
        assert len(f.read()) == 100


def test_active_key_pair_must_be_configured() -> None:
    with pytest.raises(ConfigError, match=r"encryption\.key\.pair\.id='k7'"):
        rsm_plugins.load(AIVEN_CLASS, {**plugin_block("c"), "encryption.key.pair.id": "k7"})


def test_unreadable_private_key_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    key = "encryption.key.pairs.k1.private.key.file"
    with pytest.raises(ConfigError, match="cannot read private key"):
        rsm_plugins.load(AIVEN_CLASS, {**plugin_block("c"), key: str(bad)})
    public = plugin_block("c")["encryption.key.pairs.k1.public.key.file"]
    with pytest.raises(ConfigError, match="holds a public key"):
        rsm_plugins.load(AIVEN_CLASS, {**plugin_block("c"), key: public})


def test_rlm_check_reads_but_never_probe_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, "a", tmp_path / "metadata", log_dirs=[str(tmp_path / "logs")], node_id=1)
    (tmp_path / "logs").mkdir()
    capsys.readouterr()
    assert cli_main(["check", "--config", str(cfg), "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["storage read"]["ok"]
    assert not checks["storage write"]["ok"] and "read-only" in checks["storage write"]["detail"]


def test_a_missing_filesystem_root_is_not_created(tmp_path: Path) -> None:
    root = tmp_path / "not-mounted"
    with pytest.raises(ConfigError, match="is not a directory"):
        rsm_plugins.load(AIVEN_CLASS, {**plugin_block("a"), "storage.root": str(root)})
    assert not root.exists()
    with pytest.raises(ConfigError, match="does not exist"):
        rsm_plugins.load("aiven", {"backend": "fsspec", "backend.url": root.as_uri()})
    assert not root.exists()
