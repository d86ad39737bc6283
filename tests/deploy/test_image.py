"""The container image built and run: podman (runc), a Debian-made base, the hermetic wheelhouse build.

``deploy/docker/build-image.sh`` builds the image exactly as docs/deploy.md tells operators to (base
from mmdebstrap + ``podman import``, wheels built on the host, ``pip install --no-index`` inside);
each container then runs as the image's non-root user with a read-only root file system and a
tmpfs ``/tmp``: ``rlm --version``; ``rlm run --once`` over a real broker's log dir mounted read-only,
tiering to SeaweedFS (host network) with the remote objects checked byte for byte; ``rlm run`` kept
up until the image's HEALTHCHECK passes; ``rlm serve`` with the Kafka endpoint read by
confluent-kafka on the host. Bad input: no ``BASE`` argument, a wheelhouse missing a wheel.
Caches: the mmdebstrap tar and dependency wheels in ``.cache/image``, podman's layers (the
dependency layer is rebuilt only when the dependency set changes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTp

from rlm.config import load_config
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm, load_rsm
from rlm.types import TopicIdPartition
from tests.daemon.helpers import (
    check_segment_against_local,
    create_topic,
    finished,
    produce,
    s3_storage,
    wait_for,
)
from tests.deploy.conftest import DEPLOY, ROOT
from tests.deploy.podman import Podman, RuntimeUnavailable, install_podman
from tests.services.proc import RUN_DIR

pytestmark = pytest.mark.slow

TAG = "localhost/kafka-rlm-sidecar:test"
UID = 10001
HARDENED = ("--read-only", "--tmpfs", "/tmp", "--network", "host")


@pytest.fixture(scope="session")
def podman() -> Podman:
    try:
        pm = install_podman(RUN_DIR / "podman")
    except RuntimeUnavailable as e:
        pytest.fail(str(e))
    probe = pm.run("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run on this host: {probe.stderr.strip()[-500:]}")
    assert probe.stdout.strip() == "runc"
    return pm


@pytest.fixture(scope="session")
def image(podman: Podman) -> str:
    # earlier runs' untagged images (each ~1 GB apparent, sharing the dependency layer): drop the old
    # ones, keep the recent ones that hold this build's layer cache
    podman.run("image", "prune", "-f", "--filter", "until=1h", timeout=300)
    # the Debian base and the dependency wheels are cached per machine, as Maven's ~/.m2 caches the
    # jars: a fresh clone (CI) then rebuilds only the project layer; a cold cache still builds all
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-rlm-sidecar" / "image"
    env = {**podman.env, "RUNTIME": "podman", "PYTHON": str(ROOT / ".venv" / "bin" / "python"),
           "ROOTFS_CACHE": str(cache), "WHEEL_CACHE": str(cache / "wheels")}
    r = subprocess.run([str(DEPLOY / "docker" / "build-image.sh"), TAG], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    size = int(podman.run("image", "inspect", "--format", "{{.Size}}", TAG, check=True).stdout)
    print(f"\nimage {TAG}: {size / 1e6:.0f} MB")  # reported by -s; also recorded in the note
    return TAG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _writable_by_image_user(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, UID, UID)
    return path


def test_version_as_non_root_on_a_read_only_root(podman: Podman, image: str) -> None:
    r = podman.run("run", "--rm", *HARDENED, image, "--version", check=True)
    assert r.stdout.strip() == "rlm 0.1.0"
    r = podman.run("run", "--rm", *HARDENED, "--entrypoint", "id", image, "-u", check=True)
    assert r.stdout.strip() == str(UID)
    r = podman.run("run", "--rm", *HARDENED, "--entrypoint", "sh", image, "-c", "touch /opt/rlm/x")
    assert r.returncode != 0 and "Read-only file system" in r.stderr


@pytest.fixture(scope="module")
def tiered_by_container(podman: Podman, image: str, kafka: Any, seaweedfs: Any,
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A broker topic tiered by ``rlm run --once`` in the container; the config both sides use."""
    topic = f"image-{time.time_ns()}"
    create_topic(kafka.bootstrap, topic)  # 1 MiB segments, Kafka's minimum
    produce(kafka.bootstrap, topic, 18000)
    pdir = PartitionDir(kafka.log_dir / f"{topic}-0")
    wait_for("segments rolled", lambda: len(PartitionDir(pdir.path).segments) >= 3)
    time.sleep(1.5)  # let the broker go idle (flushes, snapshots) before the container reads the dir
    pdir.refresh()
    bucket = seaweedfs.create_bucket("image")
    tmp = tmp_path_factory.mktemp("image")
    work = _writable_by_image_user(tmp / "work")
    cfg = {
        "log_dirs": ["/var/lib/kafka/data"],
        "work_dir": "/var/lib/rlm",
        "bootstrap_servers": kafka.bootstrap,
        "storage": s3_storage(seaweedfs, bucket),
        "metadata": {"manager": "file", "config": {"dir": "/var/lib/rlm/metadata"}},
        "topics": [{"pattern": topic, "remote.storage.enable": True}],
        "http": {"host": "127.0.0.1", "port": 0},
        "log_format": "json",
    }
    cfg_file = tmp / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    mounts = ("-v", f"{kafka.log_dir}:/var/lib/kafka/data:ro", "-v", f"{work}:/var/lib/rlm",
              "-v", f"{cfg_file}:/etc/rlm/rlm.yaml:ro")
    r = podman.run("run", "--rm", *HARDENED, *mounts, image, "run", "--config", "/etc/rlm/rlm.yaml", "--once",
                   timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    host_meta = {"manager": "file", "config": {"dir": str(work / "metadata")}}
    host_cfg = load_config(None, **{**cfg, "log_dirs": [str(kafka.log_dir)], "work_dir": str(tmp / "host"),
                                    "metadata": host_meta})
    try:
        yield {"topic": topic, "pdir": pdir, "mounts": mounts, "host_cfg": host_cfg, "work": work}
    finally:
        seaweedfs.delete_bucket(bucket)


def test_run_once_tiers_a_real_broker_log_dir_to_seaweedfs(tiered_by_container: dict[str, Any]) -> None:
    t = tiered_by_container
    pdir: PartitionDir = t["pdir"]
    tip = TopicIdPartition(pdir.topic_id, t["topic"], 0)
    rsm = load_rsm(t["host_cfg"], 1)
    rlmm = load_rlmm(t["host_cfg"], 99)
    try:
        rlmm.on_partition_leadership_changes({tip}, set())
        segs = finished(rlmm, tip)
        assert segs and [m.start_offset for m in segs] == [s.base_offset for s in pdir.inactive_segments()][
            :len(segs)]
        for m in segs:
            check_segment_against_local(rsm, m, pdir)  # the objects in SeaweedFS, byte for byte
    finally:
        rlmm.close()
        rsm.close()
    status = json.loads((t["work"] / "status.json").read_text())
    assert status["partitions"][f"{t['topic']}-0"]["remote_end"] == segs[-1].end_offset


def _detached(podman: Podman, *args: str) -> str:
    r = podman.run("run", "-d", *HARDENED, *args, check=True)
    return r.stdout.strip()


def _stop(podman: Podman, ctr: str) -> tuple[int, str]:
    podman.run("stop", "-t", "30", ctr, timeout=120)
    code = int(podman.run("wait", ctr, timeout=120).stdout.strip() or -1)
    logs = podman.run("logs", ctr).stderr
    podman.run("rm", "-f", ctr)
    return code, logs


def test_healthcheck_passes_and_sigterm_exits_clean(podman: Podman, image: str,
                                                    tiered_by_container: dict[str, Any]) -> None:
    port = _free_port()
    ctr = _detached(podman, *tiered_by_container["mounts"], "-e", f"RLM_HTTP__PORT={port}", image)
    try:
        deadline = time.monotonic() + 120
        while True:
            h = podman.run("healthcheck", "run", ctr)
            if h.returncode == 0:
                break
            state = podman.run("inspect", "--format", "{{.State.Status}}", ctr).stdout.strip()
            assert state == "running", podman.run("logs", ctr).stderr[-3000:]
            assert time.monotonic() < deadline, f"never healthy: {h.stdout} {h.stderr}"
            time.sleep(1)
    finally:
        code, logs = _stop(podman, ctr)
    assert code == 0, logs[-3000:]


def test_serve_kafka_endpoint_read_by_confluent_kafka(podman: Podman, image: str,
                                                      tiered_by_container: dict[str, Any]) -> None:
    t = tiered_by_container
    http_port, kafka_port = _free_port(), _free_port()
    ctr = _detached(podman, *t["mounts"], image, "serve", "--config", "/etc/rlm/rlm.yaml",
                    "--port", str(http_port), "--kafka-listener", f"127.0.0.1:{kafka_port}")
    try:
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "group.id": "image",
                      "enable.auto.commit": False, "socket.connection.setup.timeout.ms": 60000})
        try:
            tp = CkTp(t["topic"], 0, 0)
            low, high = c.get_watermark_offsets(tp, timeout=90)
            c.assign([tp])
            got: list[Any] = []
            while len(got) < 100:
                msgs = c.consume(100, timeout=30)
                assert msgs, "no records from the containerised endpoint"
                got += [m for m in msgs if m.error() is None]
        finally:
            c.close()
    finally:
        code, logs = _stop(podman, ctr)
    assert code == 0, logs[-3000:]
    assert low == 0 and high >= 100
    assert [m.offset() for m in got[:100]] == list(range(100))
    assert [m.key() for m in got[:3]] == [b"k0", b"k1", b"k2"]
    assert got[1].value() == b"B" * 200


def _context_without(tmp: Path, drop: str) -> Path:
    """A copy of the build context (hard links) with the wheel ``drop`` left out of the wheelhouse."""
    ctx = tmp / "ctx"
    src = DEPLOY / "docker"
    shutil.copytree(src / "wheelhouse", ctx / "deploy/docker/wheelhouse", copy_function=os.link)
    shutil.copy2(src / "rlm.yaml", ctx / "deploy/docker/rlm.yaml")
    for w in (ctx / "deploy/docker/wheelhouse").rglob(drop):
        w.unlink()
    return ctx


def test_build_without_a_project_wheel_fails_naming_it(podman: Podman, image: str, tmp_path: Path) -> None:
    ctx = _context_without(tmp_path, "kafka_rlm_sidecar-*.whl")
    r = podman.run("build", "--pull=never", "--format", "docker", "--build-arg",
                   "BASE=localhost/rlm-debian-base:bookworm", "-f", str(DEPLOY / "docker/Dockerfile"),
                   "-t", "localhost/kafka-rlm-sidecar:broken", str(ctx), timeout=900)
    assert r.returncode != 0
    assert "No matching distribution found for kafka-rlm-sidecar" in r.stdout + r.stderr


def test_build_without_base_argument_fails_before_any_step(podman: Podman, tmp_path: Path) -> None:
    ctx = tmp_path / "empty"
    ctx.mkdir()
    r = podman.run("build", "--pull=never", "-f", str(DEPLOY / "docker/Dockerfile"), "-t",
                   "localhost/kafka-rlm-sidecar:nobase", str(ctx), timeout=300)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert re.search(r'missing \\?"BASE\\?" build argument', out) and "STEP 1/" not in out, out[-2000:]


def test_podman_compose_builds_the_sidecar_from_the_compose_file(podman: Podman, image: str) -> None:
    """deploy/compose's ``build:`` section (context, Dockerfile, BASE argument) works as written:
    podman-compose builds the sidecar image from the wheelhouse ``image`` left behind, and it runs."""
    compose = [str(ROOT / ".venv" / "bin" / "podman-compose"), "-f", str(DEPLOY / "compose" / "compose.yaml")]
    env = podman.env
    cfg = subprocess.run([*compose, "config"], capture_output=True, text=True, env=env, timeout=120)
    assert cfg.returncode == 0, cfg.stderr[-2000:]
    rlm = yaml.safe_load(cfg.stdout)["services"]["rlm"]
    assert rlm["build"]["args"] == ["BASE=localhost/rlm-debian-base:bookworm"]
    built = subprocess.run([*compose, "build", "rlm"], capture_output=True, text=True, env=env, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    r = podman.run("run", "--rm", *HARDENED, f"localhost/{rlm['image']}", "--version", check=True)
    assert r.stdout.strip() == "rlm 0.1.0"
