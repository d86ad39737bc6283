"""A real mini HDFS (NameNode + DataNodes in one JVM) on 127.0.0.1 for tests.

Jars come from Maven Central (``deploy/local/hdfs/pom.xml``, resolved into ``.cache/hdfs/lib``); the
launcher is Hadoop's own ``org.apache.hadoop.test.MiniDFSClusterManager``. It builds a ``MiniDFSCluster``,
waits until it is active (DataNodes registered), then writes ``-writeConfig``/``-writeDetails`` files
and sleeps, so the details file appearing means the cluster is up. We then also wait for WebHDFS and
for the live DataNode count.

Ports: the NameNode RPC and HTTP (WebHDFS) ports are chosen by the kernel (``-nnport 0 -httpport 0``)
and read back from the written configuration, so there is no window in which another process can take
them. MiniDFSCluster binds every DataNode listener to ``127.0.0.1:0``; the NameNode bind hosts are forced
to 127.0.0.1 as well.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.services.proc import RUN_DIR, ServiceError, ensure_jars, java, spawn, stop, wait_until

MAIN_CLASS = "org.apache.hadoop.test.MiniDFSClusterManager"

# Hadoop 3.4 logs through slf4j-reload4j (log4j 1.x API). The hadoop-hdfs tests jar ships an INFO
# log4j.properties of its own, so ours is passed explicitly.
LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
# noisy and harmless in a mini cluster
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.metrics2.impl.MetricsConfig=ERROR
log4j.logger.org.apache.hadoop.security.authentication.server.AuthenticationFilter=ERROR
log4j.logger.org.apache.hadoop.hdfs.server.datanode.fsdataset.impl.FsDatasetImpl=ERROR
"""

# Jersey 1 (WebHDFS) logs through java.util.logging: its long resource-method warnings are noise.
JUL = """\
handlers=java.util.logging.ConsoleHandler
.level=SEVERE
java.util.logging.ConsoleHandler.level=SEVERE
"""

# JDK 17: opened for Hadoop's reflection (harmless when not needed).
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "sun.nio.ch", "sun.net.util",
)]


@dataclass
class MiniHDFS:
    """``MiniDFSClusterManager`` with ``datanodes`` DataNodes, data under ``RUN_DIR``, permissions off."""

    datanodes: int = 1
    name: str = "hdfs"
    heap: str = "768m"
    extra: dict[str, str] = field(default_factory=dict)
    user: str = field(default_factory=getpass.getuser)
    nn_port: int = 0
    http_port: int = 0
    base: Path | None = None
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    startup_seconds: float = 0.0
    _lib: Path | None = None

    # ---- paths and addresses -------------------------------------------------------------
    @property
    def lib(self) -> Path:
        if self._lib is None:
            self._lib = ensure_jars("hdfs")
        return self._lib

    @property
    def classpath(self) -> str:
        return str(self.lib / "*")

    @property
    def hdfs_url(self) -> str:
        """``hdfs://127.0.0.1:<rpc port>``: for hdfs-native, Spark and Hadoop clients."""
        return f"hdfs://127.0.0.1:{self.nn_port}"

    @property
    def url_prefix(self) -> str:
        """``webhdfs://127.0.0.1:<http port>``: prefix for fsspec URLs (``url_prefix + '/dir/file'``)."""
        return f"webhdfs://127.0.0.1:{self.http_port}"

    @property
    def webhdfs_url(self) -> str:
        """The REST root: ``http://127.0.0.1:<http port>/webhdfs/v1``."""
        return f"http://127.0.0.1:{self.http_port}/webhdfs/v1"

    @property
    def config_file(self) -> Path:
        """The cluster's Hadoop configuration as written by the manager (core/hdfs-site keys)."""
        assert self.base is not None
        return self.base / "conf.xml"

    def storage_options(self) -> dict[str, Any]:
        """fsspec ``storage_options`` for ``webhdfs`` URLs on this cluster."""
        return {"host": "127.0.0.1", "port": self.http_port, "user": self.user}

    def webhdfs_filesystem(self, **kwargs: Any) -> Any:
        """A fresh (uncached) fsspec ``webhdfs`` filesystem on the NameNode HTTP port."""
        import fsspec

        opts = self.storage_options()
        opts.update(kwargs)
        return fsspec.filesystem("webhdfs", skip_instance_cache=True, **opts)

    def hdfs_native_client(self) -> Any:
        """An ``hdfs_native.Client`` talking native RPC to the NameNode (no JVM on our side)."""
        import hdfs_native

        return hdfs_native.Client(self.hdfs_url)

    # ---- lifecycle -----------------------------------------------------------------------
    def command(self) -> list[str]:
        assert self.base is not None
        conf = {
            "hdfs.minidfs.basedir": str(self.base / "data"),
            "hadoop.tmp.dir": str(self.base / "tmp"),
            "dfs.permissions.enabled": "false",
            "dfs.replication": "1",
            "dfs.namenode.rpc-bind-host": "127.0.0.1",
            "dfs.namenode.http-bind-host": "127.0.0.1",
            "dfs.namenode.servicerpc-bind-host": "127.0.0.1",
            "dfs.namenode.lifeline.rpc-bind-host": "127.0.0.1",
            "dfs.datanode.address": "127.0.0.1:0",
            "dfs.datanode.http.address": "127.0.0.1:0",
            "dfs.datanode.https.address": "127.0.0.1:0",
            "dfs.datanode.ipc.address": "127.0.0.1:0",
            "dfs.datanode.hostname": "127.0.0.1",
            "dfs.http.policy": "HTTP_ONLY",
            "dfs.webhdfs.enabled": "true",
            # small, fast test cluster
            "dfs.namenode.handler.count": "4",
            "dfs.datanode.handler.count": "4",
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.safemode.extension": "0",
            **self.extra,
        }
        cmd = [java(), "-Xms128m", f"-Xmx{self.heap}", "-XX:+UseG1GC", *ADD_OPENS,
               "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true",
               f"-Djava.io.tmpdir={self.base / 'tmp'}",
               f"-Dlog4j.configuration=file:{self.base / 'log4j.properties'}",
               f"-Djava.util.logging.config.file={self.base / 'logging.properties'}",
               "-cp", self.classpath, MAIN_CLASS,
               "-format", "-datanodes", str(self.datanodes), "-nnport", "0", "-httpport", "0",
               "-writeConfig", str(self.config_file), "-writeDetails", str(self.base / "details.json")]
        for k, v in conf.items():
            cmd += ["-D", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 180.0) -> MiniHDFS:
        _ = self.lib
        self.base = RUN_DIR / f"{self.name}-{os.getpid()}-{time.time_ns()}"
        (self.base / "tmp").mkdir(parents=True)
        (self.base / "log4j.properties").write_text(LOG4J)
        (self.base / "logging.properties").write_text(JUL)
        self.log = self.base / "minidfs.log"
        t0 = time.monotonic()
        self.proc = spawn(self.command(), log=self.log, cwd=self.base)
        try:
            wait_until("mini hdfs (details file)", self._details_written, timeout=timeout, proc=self.proc,
                       log=self.log, interval=0.2)
            self._read_ports()
            wait_until("mini hdfs (webhdfs + live datanodes)", self._serving, timeout=60, proc=self.proc,
                       log=self.log, interval=0.2)
        except BaseException:
            self.stop(keep_data=True)  # the log stays for a look; the error quotes its end
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _details_written(self) -> bool:
        assert self.base is not None
        details = self.base / "details.json"
        if not (details.exists() and self.config_file.exists()):
            return False
        self.details = json.loads(details.read_text())
        ET.parse(self.config_file)  # complete?
        return "namenode_port" in self.details

    def _read_ports(self) -> None:
        conf = self.configuration()
        self.nn_port = int(self.details["namenode_port"])
        http = conf.get("dfs.namenode.http-address", "")
        try:
            self.http_port = int(http.rsplit(":", 1)[1])
        except (IndexError, ValueError) as e:
            raise ServiceError(f"mini hdfs: no NameNode HTTP port in {self.config_file}: {http!r}") from e
        if self.http_port == 0:
            raise ServiceError(f"mini hdfs: NameNode HTTP port not resolved in {self.config_file}")

    def configuration(self) -> dict[str, str]:
        """The written Hadoop configuration as a dict (final values, ``${...}`` not expanded)."""
        root = ET.parse(self.config_file).getroot()
        out: dict[str, str] = {}
        for prop in root.iter("property"):
            name, value = prop.findtext("name"), prop.findtext("value")
            if name is not None:
                out[name] = value or ""
        return out

    def _serving(self) -> bool:
        import requests

        no_proxy = {"http": "", "https": ""}
        r = requests.get(f"{self.webhdfs_url}/?op=GETFILESTATUS&user.name={self.user}", timeout=5,
                         proxies=no_proxy)
        if r.status_code != 200 or r.json()["FileStatus"]["type"] != "DIRECTORY":
            return False
        j = requests.get(f"http://127.0.0.1:{self.http_port}/jmx",
                         params={"qry": "Hadoop:service=NameNode,name=FSNamesystemState"}, timeout=5,
                         proxies=no_proxy).json()
        state = j["beans"][0]
        return bool(int(state["NumLiveDataNodes"]) >= self.datanodes and state["FSState"] == "Operational")

    def stop(self, *, keep_data: bool = False) -> None:
        stop(self.proc, grace=30)
        self.proc = None
        if self.base is not None and not keep_data:
            shutil.rmtree(self.base, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tests.services.hdfs
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    h = MiniHDFS().start()
    print(f"hdfs: {h.hdfs_url} webhdfs={h.webhdfs_url} url_prefix={h.url_prefix} user={h.user} "
          f"started in {h.startup_seconds:.1f}s conf={h.config_file}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        h.stop()
