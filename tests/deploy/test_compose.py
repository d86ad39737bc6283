"""deploy/compose: the file is a valid Compose file (``docker compose config`` where the CLI exists, the
Compose Specification's JSON schema always), and its sidecar config is proven: ``rlm run --once`` with
that very file, only the addresses substituted, tiers a topic of a real broker to a real SeaweedFS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from rlm.config import load_config
from rlm.log.partition import PartitionDir
from rlm.plugin_setup import load_rlmm
from rlm.types import TopicIdPartition
from tests.daemon.helpers import create_topic, finished, produce, wait_for
from tests.deploy.conftest import DEPLOY, ROOT
from tests.services.s3 import ACCESS_KEY, SECRET_KEY

COMPOSE = DEPLOY / "compose" / "compose.yaml"
SIDECAR_CONFIG = DEPLOY / "compose" / "rlm.yaml"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def compose_schema() -> dict[str, Any]:
    schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema: dict[str, Any] = json.loads(schema_file.read_text())
    return schema


def compose_cli() -> list[str]:
    """``docker compose`` where it works, else the project's own ``podman-compose`` (a dev
    dependency, so one of the two is always here and the test below never skips)."""
    docker = shutil.which("docker")
    found = docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True)
    if found and found.returncode == 0:
        assert docker is not None
        return [docker, "compose"]
    return [str(Path(sys.executable).parent / "podman-compose")]


def test_compose_matches_the_compose_spec_schema() -> None:
    jsonschema.validate(compose(), compose_schema())


def test_a_compose_implementation_renders_the_file_and_the_result_is_valid() -> None:
    """The file as a Compose implementation reads it (variables interpolated, defaults applied)
    parses, still matches the Compose Specification, and keeps every service of the file."""
    res = subprocess.run(
        [*compose_cli(), "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rendered = yaml.safe_load(res.stdout)
    jsonschema.validate(rendered, compose_schema())
    assert set(rendered["services"]) == set(compose()["services"])
    assert rendered["services"]["rlm"]["read_only"] is True


def test_services_and_mounts() -> None:
    services = compose()["services"]
    assert {"kafka", "s3", "rlm", "prometheus", "grafana"} <= set(services)
    for name, svc in services.items():
        if "image" in svc:
            assert not svc["image"].endswith(":latest") and ":" in svc["image"], name
    kafka_vol = next(v.split(":")[0] for v in services["kafka"]["volumes"])
    log_dir = services["kafka"]["environment"]["KAFKA_LOG_DIRS"]
    rlm = services["rlm"]
    mounts = {v.split(":")[1]: v.split(":") for v in rlm["volumes"]}
    assert mounts[log_dir] == [kafka_vol, log_dir, "ro"], "the sidecar mounts the broker's volume read-only"
    cfg_src = mounts["/etc/rlm/rlm.yaml"][0]
    assert (COMPOSE.parent / cfg_src).resolve() == SIDECAR_CONFIG.resolve()
    assert rlm["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert "BASE" in rlm["build"]["args"], "the Dockerfile's BASE has no default"
    assert (COMPOSE.parent / rlm["build"]["context"]).resolve() == ROOT
    cfg = load_config(SIDECAR_CONFIG)
    assert [str(d) for d in cfg.log_dirs] == [log_dir]
    assert cfg.work_dir.as_posix() in mounts
    assert f"{cfg.http.port}:{cfg.http.port}" in rlm["ports"] and cfg.http.host == "0.0.0.0"
    grace = float(rlm["stop_grace_period"].rstrip("s"))
    assert grace > cfg.shutdown_timeout_s
    assert rlm["read_only"] is True
    # Prometheus scrapes the sidecar at its configured port
    prom = yaml.safe_load((COMPOSE.parent / "prometheus.yml").read_text())
    targets = [t for sc in prom["scrape_configs"] for st in sc["static_configs"] for t in st["targets"]]
    assert f"rlm:{cfg.http.port}" in targets
    assert cfg.bootstrap_servers == "kafka:9092"
    assert "access_key_id" not in cfg.storage.config, "credentials come from the environment"


def substituted_config(
    tmp: Path, *, bootstrap: str, endpoint: str, bucket: str, log_dir: Path, metadata_topic: str
) -> Path:
    """The compose sidecar config with only the addresses replaced (and a private metadata topic)."""
    raw = yaml.safe_load(SIDECAR_CONFIG.read_text())
    out = json.loads(json.dumps(raw))
    out["bootstrap_servers"] = bootstrap
    out["storage"]["config"]["endpoint_url"] = endpoint
    out["storage"]["config"]["bucket"] = bucket
    out["log_dirs"] = [str(log_dir)]
    out["work_dir"] = str(tmp / "work")
    out["metadata"]["config"]["remote.log.metadata.topic.name"] = metadata_topic
    changed = {k for k in raw if raw[k] != out[k]}
    assert changed <= {"bootstrap_servers", "storage", "log_dirs", "work_dir", "metadata"}
    f = tmp / "rlm.yaml"
    f.write_text(yaml.safe_dump(out))
    return f


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.s3
def test_compose_sidecar_config_tiers_a_topic(
    kafka: Any, seaweedfs: Any, seaweedfs_bucket: str, unique_topic: str, tmp_path: Path
) -> None:
    bs = kafka.bootstrap
    topic = f"demo-{unique_topic[-8:]}"
    assert load_config(SIDECAR_CONFIG).topic_config(topic).remote_storage_enable, "the demo pattern"
    create_topic(bs, topic)
    produce(bs, topic, 12000)
    pdir_path = kafka.log_dir / f"{topic}-0"
    wait_for("segments rolled", lambda: len(PartitionDir(pdir_path).segments) >= 3)
    time.sleep(1.0)  # let the producer's last batches settle (the LSO is read from the broker anyway)
    cfg_file = substituted_config(
        tmp_path,
        bootstrap=bs,
        endpoint=seaweedfs.endpoint_url,
        bucket=seaweedfs_bucket,
        log_dir=kafka.log_dir,
        metadata_topic=f"__rlm_meta_{unique_topic[-8:]}",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "AWS_"))}
    env |= {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    res = subprocess.run(
        [sys.executable, "-m", "rlm.cli", "run", "--once", "--config", str(cfg_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]

    cfg = load_config(cfg_file)
    pdir = PartitionDir(pdir_path)
    tip = TopicIdPartition(pdir.topic_id, topic, 0)
    reader = load_rlmm(cfg.model_copy(update={"work_dir": tmp_path / "reader"}), 97)
    try:
        reader.on_partition_leadership_changes(set(), {tip})
        segs = finished(reader, tip)
    finally:
        reader.close()
    want = [s.base_offset for s in pdir.inactive_segments()]
    assert len(want) >= 2
    assert [m.start_offset for m in segs] == want
    s3 = seaweedfs.boto3_client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=seaweedfs_bucket).get("Contents", [])]
    assert keys and all(k.startswith(cfg.storage.config["prefix"]) for k in keys)
    assert sum(k.endswith(".log") for k in keys) == len(want)
