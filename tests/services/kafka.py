"""A real Apache Kafka cluster on 127.0.0.1 for tests: one node or three, KRaft or ZooKeeper.

Jars come from Maven Central (``deploy/local/kafka/pom.xml`` for the default 4.1.1,
``deploy/local/kafka28``, ``kafka35``, ``kafka39``, ``kafka44`` for the others in :data:`VERSIONS`). A KRaft
node is a combined broker+controller with a static quorum, so ``StorageTool format`` needs no
bootstrap flags. In ZooKeeper mode (``zookeeper=True``, Kafka before 4.0) one ZooKeeper server
is started from the same jars (ZooKeeper is a runtime dependency of ``kafka_2.13``) and every
node is a plain broker. Kafka's own tools (DumpLogSegments, the console consumer, the metadata
formatter) run from the same jars through :meth:`KafkaCluster.run_class`.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.services.proc import (
    RUN_DIR,
    ServiceError,
    ensure_jars,
    free_ports,
    java,
    kill,
    spawn,
    stop,
    tcp_open,
    wait_until,
)

LOG4J2 = """\
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""

# Kafka before 4.0 logs through log4j 1 (log4j 1.2 in 2.8, reload4j in 3.x): same output as above
LOG4J1 = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

DEFAULT_VERSION = "4.1.1"


@dataclass(frozen=True)
class KafkaVersion:
    """A Kafka release the test services can start: its jars (``deploy/local/<jars>``) and modes."""

    version: str
    jars: str
    kraft: bool
    zookeeper: bool

    @property
    def log4j1(self) -> bool:
        """Kafka 4.0 moved to log4j 2; older brokers read a log4j 1 properties file."""
        return not self.version.startswith("4.")


# KRaft in 2.8 was an early-access preview without transactions or ACLs: ZooKeeper only here.
VERSIONS: dict[str, KafkaVersion] = {
    "4.4.0": KafkaVersion("4.4.0", "kafka44", kraft=True, zookeeper=False),
    "4.1.1": KafkaVersion("4.1.1", "kafka", kraft=True, zookeeper=False),
    "3.9.2": KafkaVersion("3.9.2", "kafka39", kraft=True, zookeeper=True),
    "3.5.2": KafkaVersion("3.5.2", "kafka35", kraft=True, zookeeper=True),
    "2.8.2": KafkaVersion("2.8.2", "kafka28", kraft=False, zookeeper=True),
}


def kafka_version(version: str, *, zookeeper: bool) -> KafkaVersion:
    """The :class:`KafkaVersion` of ``version``; a ServiceError naming what this version lacks."""
    v = VERSIONS.get(version)
    if v is None:
        raise ServiceError(f"no test jars for Kafka {version!r}: known {sorted(VERSIONS)}")
    if zookeeper and not v.zookeeper:
        raise ServiceError(f"Kafka {version} has no ZooKeeper mode")
    if not zookeeper and not v.kraft:
        raise ServiceError(f"Kafka {version} is started in ZooKeeper mode only (zookeeper=True)")
    return v


def kafka_uuid() -> str:
    """A Kafka ``Uuid`` text: URL-safe base64 of 16 random bytes, no padding, never starting with '-'."""
    while True:
        raw = os.urandom(16)
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if not text.startswith("-") and raw not in (bytes(16), bytes(15) + b"\x01"):
            return text


@dataclass
class KafkaNode:
    node_id: int
    broker_port: int
    controller_port: int
    log_dir: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass(frozen=True)
class SaslScram:
    """A SASL_PLAINTEXT client listener with SCRAM: the only listener clients can reach.

    The credentials are written into the cluster metadata at format time (``kafka-storage format
    --add-scram``, KIP-900), so the broker authenticates its own inter-broker connections with the
    first user and no PLAINTEXT listener is needed.
    """

    users: tuple[tuple[str, str], ...] = (("admin", "admin-secret"),)
    mechanism: str = "SCRAM-SHA-512"

    def client_config(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings of a client logging in as ``user`` (default: the first user)."""
        name, pw = self.users[0]
        if user is not None:
            name, pw = user, dict(self.users).get(user, "")
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.mechanism,
            "sasl.username": name,
            "sasl.password": pw if password is None else password,
        }


@dataclass
class KafkaCluster:
    """One or three nodes. ``extra`` server properties apply to every node; with ``sasl``
    the client listener is SASL_PLAINTEXT (no PLAINTEXT listener at all, KRaft only).
    ``version`` picks the jars (:data:`VERSIONS`); ``zookeeper`` starts a ZooKeeper server and
    ZooKeeper-mode brokers instead of KRaft nodes."""

    nodes: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    sasl: SaslScram | None = None
    name: str = "kafka"
    heap: str = "512m"
    version: str = DEFAULT_VERSION
    zookeeper: bool = False
    _nodes: list[KafkaNode] = field(default_factory=list)
    _lib: Path | None = None
    _base: Path | None = None
    cluster_id: str = ""
    zk_port: int = 0
    _zk_proc: subprocess.Popen[bytes] | None = None

    @property
    def release(self) -> KafkaVersion:
        return kafka_version(self.version, zookeeper=self.zookeeper)

    # ---- paths and addresses -------------------------------------------------------------
    @property
    def lib(self) -> Path:
        if self._lib is None:
            self._lib = ensure_jars(self.release.jars)
        return self._lib

    @property
    def classpath(self) -> str:
        return str(self.lib / "*")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.broker_port}" for n in self._nodes)

    @property
    def client_config(self) -> dict[str, str]:
        """librdkafka settings every client of this cluster needs (SASL login or nothing)."""
        return self.sasl.client_config() if self.sasl is not None else {}

    @property
    def log_dir(self) -> Path:
        """The (first) node's log dir: where its partition directories live."""
        return self._nodes[0].log_dir

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self._nodes if n.node_id == node_id)

    @property
    def node_ids(self) -> list[int]:
        return [n.node_id for n in self._nodes]

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> KafkaCluster:
        if self.sasl is not None and self.zookeeper:
            raise ServiceError("sasl is set up through KRaft's format step: not in ZooKeeper mode")
        _ = self.lib
        self._base = RUN_DIR / f"{self.name}-{os.getpid()}-{time.time_ns()}"
        self._base.mkdir(parents=True)
        (self._base / "log4j2.properties").write_text(LOG4J2)
        (self._base / "log4j.properties").write_text(LOG4J1)
        ports = free_ports(2 * self.nodes + (1 if self.zookeeper else 0))
        self._nodes = [
            KafkaNode(
                node_id=i + 1,
                broker_port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                log_dir=self._base / f"node{i + 1}" / "data",
                config=self._base / f"node{i + 1}" / "server.properties",
                log=self._base / f"node{i + 1}" / "server.log",
            )
            for i in range(self.nodes)
        ]
        self.cluster_id = kafka_uuid()
        if self.zookeeper:
            self.zk_port = ports[-1]
            self._start_zookeeper(timeout)
        for n in self._nodes:
            n.config.parent.mkdir(parents=True)
            n.config.write_text(self._properties(n))
            if self.zookeeper:
                continue  # a ZooKeeper-mode broker formats its own log dir on first start
            scram: list[str] = []
            if self.sasl is not None:
                for user, password in self.sasl.users:
                    scram += ["--add-scram", f"{self.sasl.mechanism}=[name={user},password={password}]"]
            self.run_class(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(n.config),
                "--ignore-formatted",
                *scram,
                check=True,
                heap="256m",
            )
        for n in self._nodes:
            self.start_node(n.node_id, wait=False)
        for n in self._nodes:
            self._wait_ready(n, timeout)
        return self

    def _start_zookeeper(self, timeout: float) -> None:
        """One standalone ZooKeeper server from the broker's own jars, for ZooKeeper-mode brokers."""
        assert self._base is not None
        zk = self._base / "zookeeper"
        zk.mkdir()
        conf = zk / "zookeeper.properties"
        conf.write_text(
            f"dataDir={zk / 'data'}\nclientPort={self.zk_port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n"
        )
        log = zk / "zookeeper.log"
        cmd = [
            java(),
            "-Xmx128m",
            f"-Dlog4j.configuration=file:{self._base / 'log4j.properties'}",
            "-cp",
            self.classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(conf),
        ]
        self._zk_proc = spawn(cmd, log=log)

        def ready() -> bool:
            import socket

            with socket.create_connection(("127.0.0.1", self.zk_port), timeout=2) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"

        wait_until("zookeeper", ready, timeout=timeout, proc=self._zk_proc, log=log, interval=0.25)

    def _zookeeper_properties(self, n: KafkaNode) -> dict[str, str]:
        """What a ZooKeeper-mode broker needs instead of the KRaft settings."""
        return {
            "broker.id": str(n.node_id),
            "zookeeper.connect": f"127.0.0.1:{self.zk_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{n.broker_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.broker_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
        }

    def _properties(self, n: KafkaNode) -> str:
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self._nodes)
        rf = str(min(3, self.nodes))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(n.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{n.broker_port},CONTROLLER://127.0.0.1:{n.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(n.log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.segment.bytes": "1048576",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "1000",
            # DeleteRecords reaches log-start-offset-checkpoint within 1 s, not Kafka's 60 s: the
            # tests that read a log dir without the broker wait for that file
            "log.flush.start.offset.checkpoint.interval.ms": "1000",
            # the log manager's tasks (retention, DeleteRecords' segment deletion, the checkpoints
            # above) first run 30 s after a node starts in Kafka; a test that (re)starts a node and
            # then waits for retention would wait for that delay (an internal, testing-only setting)
            "log.initial.task.delay.ms": "1000",
            "auto.create.topics.enable": "false",
        }
        if self.zookeeper:
            for kraft_only in ("process.roles", "node.id", "controller.quorum.voters"):
                del props[kraft_only]
            del props["controller.listener.names"]
            props.update(self._zookeeper_properties(n))
        if self.sasl is not None:
            user, password = self.sasl.users[0]
            mech = self.sasl.mechanism
            jaas = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{password}";'
            )
            props.update(
                {
                    "listeners": f"SASL_PLAINTEXT://127.0.0.1:{n.broker_port},"
                    f"CONTROLLER://127.0.0.1:{n.controller_port}",
                    "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{n.broker_port}",
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms": mech,
                    "sasl.mechanism.inter.broker.protocol": mech,
                    f"listener.name.sasl_plaintext.{mech.lower()}.sasl.jaas.config": jaas,
                }
            )
        props.update({k: v.replace("{node_id}", str(n.node_id)) for k, v in self.extra.items()})
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start_node(self, node_id: int, *, wait: bool = True, timeout: float = 120.0) -> None:
        n = self.node(node_id)
        assert self._base is not None
        cmd = [
            java(),
            "-Xms128m",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._base / 'log4j2.properties'}",
            *self._log4j1_flags(),
            f"-Dkafka.logs.dir={n.log.parent}",
            "-cp",
            self.classpath,
            "kafka.Kafka",
            str(n.config),
        ]
        n.proc = spawn(cmd, log=n.log)
        if wait:
            self._wait_ready(n, timeout)

    def _log4j1_flags(self) -> list[str]:
        if not self.release.log4j1 or self._base is None:
            return []
        return [f"-Dlog4j.configuration=file:{self._base / 'log4j.properties'}"]

    def stop_node(self, node_id: int) -> None:
        n = self.node(node_id)
        stop(n.proc, grace=30)
        n.proc = None

    def _wait_ready(self, n: KafkaNode, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        def ready() -> bool:
            if not tcp_open(n.broker_port):
                return False
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{n.broker_port}", **self.client_config})
            md = admin.list_topics(timeout=5)
            return n.node_id in md.brokers and len(md.brokers) >= 1

        wait_until(f"kafka node {n.node_id}", ready, timeout=timeout, proc=n.proc, log=n.log, interval=0.5)

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop every node; its data is deleted unless ``keep_data``.

        Data thrown away needs no controlled shutdown, so the nodes are SIGKILLed: with several
        nodes the last one's controlled shutdown waits for a quorum that is gone until the 30 s
        grace ends. Kept data gets the graceful stop (a clean shutdown marker, no log recovery).
        """
        for n in reversed(self._nodes):
            if keep_data:
                stop(n.proc, grace=30)
            elif n.proc is not None:
                kill(n.proc)
            n.proc = None
        if self._zk_proc is not None:
            if keep_data:
                stop(self._zk_proc, grace=30)
            else:
                kill(self._zk_proc)
            self._zk_proc = None
        if self._base is not None and not keep_data:
            shutil.rmtree(self._base, ignore_errors=True)

    # ---- Kafka's own tools -----------------------------------------------------------------
    def run_class(
        self,
        main_class: str,
        *args: str,
        check: bool = False,
        heap: str = "256m",
        timeout: float = 300,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a main class from the broker's jars (DumpLogSegments, ConsoleConsumer, ...)."""
        log4j = self._base / "log4j2.properties" if self._base else None
        cmd = [java(), f"-Xmx{heap}", "-Djava.awt.headless=true"]
        if log4j is not None:
            cmd.append(f"-Dlog4j2.configurationFile={log4j}")
            cmd += self._log4j1_flags()
        cmd += ["-cp", self.classpath, main_class, *args]
        res = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input.decode() if input is not None else None,
        )
        if check and res.returncode != 0:
            raise ServiceError(
                f"{main_class} {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
            )
        return res

    def dump_log_segments(
        self, *files: Path | str, extra: tuple[str, ...] = ("--deep-iteration",)
    ) -> subprocess.CompletedProcess[str]:
        return self.run_class(
            "kafka.tools.DumpLogSegments", "--files", ",".join(str(f) for f in files), *extra
        )


def run_tool(
    main_class: str, *args: str, heap: str = "256m", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool class without a cluster (e.g. DumpLogSegments on our own files)."""
    lib = ensure_jars("kafka")
    cmd = [java(), f"-Xmx{heap}", "-Dlog4j2.level=WARN", "-cp", str(lib / "*"), main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def dump_log_segments(
    *files: Path | str, extra: tuple[str, ...] = ("--deep-iteration",)
) -> subprocess.CompletedProcess[str]:
    return run_tool("kafka.tools.DumpLogSegments", "--files", ",".join(str(f) for f in files), *extra)


DUMP_PROBLEMS = (
    "isvalid: false",
    "Mismatches in",
    "Found timestamp mismatch",
    "out of order",
    "not found in the log",
    "Non-consecutive",
    "invalid bytes",
    "Exception",
    "error",
)


def dump_problems(res: subprocess.CompletedProcess[str]) -> list[str]:
    """Lines of DumpLogSegments output that report a problem (it exits 0 even then)."""
    out = []
    for line in (res.stdout + "\n" + res.stderr).splitlines():
        if any(p.lower() in line.lower() for p in DUMP_PROBLEMS):
            out.append(line)
    if res.returncode != 0:
        out.append(f"exit status {res.returncode}")
    return out


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    c = KafkaCluster(nodes=int(sys.argv[1]) if len(sys.argv) > 1 else 1).start()
    print(f"bootstrap={c.bootstrap} log_dir={c.log_dir}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        c.stop()
    raise ServiceError("unreachable")
