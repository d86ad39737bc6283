"""A real Spark standalone cluster on 127.0.0.1: one master and N workers from the pyspark wheel.

The wheel has ``bin/spark-class`` but no ``sbin/start-*.sh``; ``spark-class`` execs java, so each
recorded process is the JVM itself and is stopped by its own process group. Every worker gets
``RLM_TEST_WORKER=<name>`` in its environment, which its executors and their Python workers
inherit, so a test can tell on which worker a task ran. Python on executors is the test venv's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tests.services.proc import free_ports, spawn, stop, wait_until


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """``start()`` -> master URL in ``url``; ``stop()`` ends every JVM it started."""

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.base = base
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self._procs: list[subprocess.Popen[bytes]] = []
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        self.url = f"spark://127.0.0.1:{self.port}"

    def _env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=sys.executable,
                   SPARK_LOG_DIR=str(self.base / "logs"), SPARK_DAEMON_MEMORY="256m",
                   SPARK_NO_DAEMONIZE="1", **extra)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                         env.get("PYTHONPATH", "")) if p)
        return env

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data

    def start(self) -> SparkCluster:
        cls = str(spark_home() / "bin" / "spark-class")
        log = self.base / "master.log"
        master = spawn([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                        str(self.port), "--webui-port", str(self.ui_port)], log=log, env=self._env())
        self._procs.append(master)
        wait_until("spark master", lambda: self.state()["status"] == "ALIVE", timeout=120, proc=master,
                   log=log)
        for i in range(self.workers):
            name = f"w{i + 1}"
            work = self.base / name
            work.mkdir(parents=True, exist_ok=True)
            wlog = self.base / f"worker-{name}.log"
            self._procs.append(spawn(
                [cls, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory, "--webui-port",
                 str(self.worker_ui_ports[i]), "--work-dir", str(work)],
                log=wlog, env=self._env(RLM_TEST_WORKER=name)))
        wait_until("spark workers alive",
                   lambda: sum(w["state"] == "ALIVE" for w in self.state()["workers"]) == self.workers,
                   timeout=120, proc=master, log=log)
        return self

    def stop(self) -> None:
        for p in reversed(self._procs):
            stop(p, grace=20)
        self._procs.clear()
