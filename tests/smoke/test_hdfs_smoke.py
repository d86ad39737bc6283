"""HDFS smoke tests: the real mini cluster through fsspec WebHDFS and the hdfs-native RPC client."""

from __future__ import annotations

import os

import fsspec
import pytest

from tests.services.hdfs import MiniHDFS
from tests.smoke._sockets import listening_addresses, non_loopback

pytestmark = pytest.mark.hdfs

MiB = 1024 * 1024


def test_webhdfs_write_read_range_list_delete(hdfs: MiniHDFS, hdfs_path: str) -> None:
    fs = hdfs.webhdfs_filesystem()
    body = os.urandom(3 * MiB + 11)
    path = f"{hdfs_path}/seg/00000000000000000000.log"
    with fs.open(path, "wb") as f:
        f.write(body)

    assert fs.info(path)["size"] == len(body)
    assert fs.cat_file(path) == body
    assert fs.cat_file(path, start=MiB - 5, end=MiB + 5) == body[MiB - 5:MiB + 5]
    with fs.open(path, "rb") as f:
        f.seek(2 * MiB)
        assert f.read(1000) == body[2 * MiB:2 * MiB + 1000]

    fs.pipe_file(f"{hdfs_path}/seg/00000000000000000000.index", b"idx")
    names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{hdfs_path}/seg", detail=False))
    assert names == ["00000000000000000000.index", "00000000000000000000.log"]

    fs.rm(path)
    assert not fs.exists(path)
    assert fs.exists(f"{hdfs_path}/seg/00000000000000000000.index")


def test_url_prefix_opens_through_fsspec(hdfs: MiniHDFS, hdfs_path: str) -> None:
    url = f"{hdfs.url_prefix}{hdfs_path}/via-url.txt"
    assert url.startswith("webhdfs://127.0.0.1:")
    with fsspec.open(url, "wb", user=hdfs.user) as f:
        f.write(b"through the url prefix")
    with fsspec.open(url, "rb", user=hdfs.user) as f:
        assert f.read() == b"through the url prefix"
    assert hdfs.webhdfs_filesystem().cat_file(f"{hdfs_path}/via-url.txt") == b"through the url prefix"


def test_hdfs_native_rpc_client(hdfs: MiniHDFS, hdfs_path: str) -> None:
    client = hdfs.hdfs_native_client()
    body = os.urandom(2 * MiB + 3)
    path = f"{hdfs_path}/native.bin"
    with client.create(path) as w:
        w.write(body)

    assert client.get_file_info(path).length == len(body)
    with client.read(path) as r:
        assert r.size == len(body)
        assert r.read_range(MiB, 4096) == body[MiB:MiB + 4096]
        r.seek(len(body) - 10)
        assert r.read() == body[-10:]
        r.seek(0)
        assert r.read() == body
    assert [s.path.rsplit("/", 1)[1] for s in client.list_status(hdfs_path)] == ["native.bin"]

    # the two clients see the same namespace
    assert hdfs.webhdfs_filesystem().cat_file(path, start=0, end=100) == body[:100]
    hdfs.webhdfs_filesystem().pipe_file(f"{hdfs_path}/from-webhdfs.txt", b"hello rpc")
    with client.read(f"{hdfs_path}/from-webhdfs.txt") as r:
        assert r.read() == b"hello rpc"

    assert client.delete(path) is True
    assert sorted(s.path.rsplit("/", 1)[1] for s in client.list_status(hdfs_path)) == ["from-webhdfs.txt"]


def test_hdfs_is_loopback_only(hdfs: MiniHDFS) -> None:
    assert hdfs.proc is not None and hdfs.proc.poll() is None
    assert hdfs.nn_port > 0 and hdfs.http_port > 0
    listening = {port for _, _, port in listening_addresses(hdfs.proc.pid)}
    # NameNode RPC + HTTP, DataNode data transfer + HTTP + IPC at least
    assert {hdfs.nn_port, hdfs.http_port} <= listening and len(listening) >= 5
    assert non_loopback(hdfs.proc.pid) == []
