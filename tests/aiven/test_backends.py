"""The ``aiven`` layout over every storage backend: S3 (Aiven's ``S3Storage`` lines, mapped to our
``s3`` plugin), fsspec (s3fs) and, in the other tests, the filesystem. The encrypted, compressed
variant is uploaded under a key prefix to a real S3 server (moto in server mode); every segment
read back is the broker's file. Also the KIP-917 custom metadata that moves ``.log``/``.indexes``."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

import rsm_plugins
from rlm.types import IndexType, RemoteLogSegmentMetadata
from rsm_plugins.aiven_keys import decode_custom_metadata
from tests.aiven.helpers import AIVEN_CLASS, finished_segments, local_files, plugin_block, variant_dir
from tests.services.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Endpoint

S3_STORAGE = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
PREFIX = "tiered/"


def _upload(server: S3Endpoint, bucket: str, variant: str, prefix: str, only: str | None = None) -> None:
    client = server.boto3_client()
    root = variant_dir(variant) / "storage"
    for path in sorted(root.rglob("*")):
        if path.is_file() and (only is None or path.name.endswith(only)):
            key = prefix + path.relative_to(root).as_posix()
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


def _broker_s3_lines(server: S3Endpoint, bucket: str, variant: str) -> dict[str, str]:
    """The block a broker with Aiven's S3Storage has (``rsm.config.`` stripped)."""
    block = {k: v for k, v in plugin_block(variant).items() if not k.startswith("storage.")}
    return {**block, "key.prefix": PREFIX, "storage.backend.class": S3_STORAGE,
            "storage.s3.bucket.name": bucket, "storage.s3.endpoint.url": server.endpoint_url,
            "storage.s3.region": REGION, "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": ACCESS_KEY, "storage.aws.secret.access.key": SECRET_KEY}


def _check_all(rsm: rsm_plugins.api.RemoteStorageManager, variant: str,
               segments: list[RemoteLogSegmentMetadata] | None = None) -> int:
    files = local_files(variant)
    n = 0
    for md in segments or finished_segments(variant):
        tp = md.topic_id_partition
        with rsm.fetch_log_segment(md, 0) as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == files[f"{tp.topic}/{tp.partition}"][
            f"{md.start_offset:020d}.log"]["sha256"]
        with rsm.fetch_index(md, IndexType.OFFSET) as f:
            assert hashlib.sha256(f.read()).hexdigest() == files[f"{tp.topic}/{tp.partition}"][
                f"{md.start_offset:020d}.index"]["sha256"]
        n += 1
    return n


def test_s3_backend_from_the_brokers_lines(moto_server: S3Endpoint, moto_bucket: str) -> None:
    _upload(moto_server, moto_bucket, "c", PREFIX)
    rsm = rsm_plugins.load(AIVEN_CLASS, _broker_s3_lines(moto_server, moto_bucket, "c"))
    assert rsm.config.backend == "s3"  # type: ignore[attr-defined]
    assert _check_all(rsm, "c") == 12
    rsm.close()


def test_fsspec_backend(moto_server: S3Endpoint, moto_bucket: str) -> None:
    _upload(moto_server, moto_bucket, "b", PREFIX)
    block = {k: v for k, v in plugin_block("b").items() if not k.startswith("storage.")}
    rsm = rsm_plugins.load("aiven", {**block, "key.prefix": PREFIX, "backend": "fsspec",
                                     "backend.url": f"s3://{moto_bucket}",
                                     "backend.storage_options": moto_server.storage_options()})
    assert _check_all(rsm, "b") == 12
    md = finished_segments("b")[0]
    objs = rsm.list_segment_objects(md.topic_id_partition)
    assert objs is not None and {o.segment_id for o in objs} >= {md.remote_log_segment_id.id.text}
    assert len(objs) == 3 * len({o.segment_id for o in objs})
    rsm.close()


def _tagged(fields: dict[int, bytes]) -> bytes:
    out = bytes([len(fields)])
    for tag, value in fields.items():
        out += bytes([tag, len(value)]) + value
    return out


def _compact(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_custom_metadata_object_prefix_moves_log_and_indexes_not_the_manifest(
        moto_server: S3Endpoint, moto_bucket: str) -> None:
    _upload(moto_server, moto_bucket, "c", PREFIX, only=".rsm-manifest")
    _upload(moto_server, moto_bucket, "c", "moved/", only=".log")
    _upload(moto_server, moto_bucket, "c", "moved/", only=".indexes")
    custom = _tagged({0: bytes([0x80, 0x01]), 1: _compact("moved/")})  # remote size, object prefix
    assert decode_custom_metadata(custom) == {1: "moved/"}
    segments = [dataclasses.replace(md, custom_metadata=custom) for md in finished_segments("c")]
    rsm = rsm_plugins.load(AIVEN_CLASS, _broker_s3_lines(moto_server, moto_bucket, "c"))
    assert _check_all(rsm, "c", segments) == 12
    rsm.close()


def test_custom_metadata_object_key() -> None:
    md = finished_segments("a")[0]
    custom = _tagged({2: _compact("elsewhere/x")})
    from rsm_plugins.aiven_keys import object_keys

    keys = object_keys("p/", dataclasses.replace(md, custom_metadata=custom))
    assert keys.log == "p/elsewhere/x.log" and keys.indexes == "p/elsewhere/x.indexes"
    assert keys.manifest.startswith("p/tiered-") and keys.manifest.endswith(".rsm-manifest")


@pytest.mark.parametrize("bad", [b"\x01\x01\x05ab", b"\x01\x01\x02\x05a", b"\x00\x00"])
def test_custom_metadata_garbage_is_a_typed_error(bad: bytes) -> None:
    with pytest.raises(rsm_plugins.api.RemoteObjectFormatError):
        decode_custom_metadata(bad)


def test_key_prefix_paths_cannot_leave_the_root(tmp_path: Path) -> None:
    rsm = rsm_plugins.load(AIVEN_CLASS, {**plugin_block("a"), "key.prefix": "../"})
    with pytest.raises(rsm_plugins.api.ConfigError):
        rsm.fetch_log_segment(finished_segments("a")[0], 0)


def test_s3_lines_in_rlm_yaml_keep_the_secret_hidden(moto_server: S3Endpoint, moto_bucket: str,
                                                     tmp_path: Path) -> None:
    from rlm.config import load_config
    from rlm.plugin_setup import load_rsm

    _upload(moto_server, moto_bucket, "c", PREFIX)
    lines = {f"rsm.config.{k}": v for k, v in _broker_s3_lines(moto_server, moto_bucket, "c").items()}
    cfg = load_config(None, work_dir=str(tmp_path), **{"remote.log.storage.manager.class.name": AIVEN_CLASS},
                      **lines)
    assert SECRET_KEY not in repr(cfg) and SECRET_KEY not in str(cfg.storage.config)
    rsm = load_rsm(cfg, 1)
    assert _check_all(rsm, "c", finished_segments("c")[:2]) == 2
    rsm.close()


def test_s3_listing_of_a_partition(moto_server: S3Endpoint, moto_bucket: str) -> None:
    _upload(moto_server, moto_bucket, "c", PREFIX)
    rsm = rsm_plugins.load(AIVEN_CLASS, _broker_s3_lines(moto_server, moto_bucket, "c"))
    md = finished_segments("c")[0]
    objs = rsm.list_segment_objects(md.topic_id_partition)
    assert objs is not None
    mine = [o for o in objs if o.segment_id == md.remote_log_segment_id.id.text]
    assert sorted(o.key.rsplit(".", 1)[-1] for o in mine) == ["indexes", "log", "rsm-manifest"]
    assert all(o.key.startswith(PREFIX) and o.start_offset == md.start_offset for o in mine)
    rsm.close()
