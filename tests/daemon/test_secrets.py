"""Secrets (SASL/SSL passwords, S3 secret keys, tokens) never appear in logs, status, errors or repr,
and still reach the client libraries in clear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rsm_plugins
from rlm.config import load_config
from rlm.errors import ConfigError
from rlm.secrets import is_secret_key, reveal_all
from rlmm.topic_config import TopicRlmmConfig
from rsm_plugins.fsspec_rsm import FsspecRemoteStorageManager
from tests.daemon.test_standalone import write_partition
from tests.services.s3 import ACCESS_KEY, MotoServer

ROOT = Path(__file__).resolve().parents[2]
SASL = "sasl-pw-3f9a1c"
SSL_KEY = "ssl-key-pw-77b2"
S3_SECRET = "s3-secret-d41e0a"
RLMM_SASL = "rlmm-sasl-pw-90cc"
ENV_SECRET = "env-oauth-secret-5e1d"
TOKEN = "fs-token-a1b2c3"
ALL = (SASL, SSL_KEY, S3_SECRET, RLMM_SASL, ENV_SECRET, TOKEN)


@pytest.mark.parametrize(
    ("key", "secret"),
    [("sasl.password", True), ("ssl.key.password", True), ("ssl.keystore.password", True),
     ("sasl.jaas.config", True), ("secret_access_key", True), ("sasl.oauthbearer.client.secret", True),
     ("token", True), ("ssl.key.pem", True), ("bootstrap.servers", False), ("sasl.username", False),
     ("ssl.key.location", False), ("security.protocol", False), ("bucket", False)],
)
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_config_repr_dump_and_errors_hide_secrets() -> None:
    cfg = load_config(
        None,
        log_dirs=["/d"],
        kafka_client={"sasl.password": SASL, "ssl.key.password": SSL_KEY, "sasl.username": "u"},
        storage={"plugin": "s3", "config": {"bucket": "b-1", "secret_access_key": S3_SECRET}},
        metadata={"manager": "topic",
                  "config": {"remote.log.metadata.common.client.sasl.password": RLMM_SASL}},
    )
    shown = repr(cfg) + str(cfg) + cfg.model_dump_json() + str(cfg.model_dump())
    assert not [s for s in ALL if s in shown]
    assert cfg.kafka_client["sasl.username"] == "u"  # only credentials are hidden
    assert reveal_all(cfg.kafka_client) == {
        "sasl.password": SASL, "ssl.key.password": SSL_KEY, "sasl.username": "u"}
    with pytest.raises(ConfigError) as e:
        load_config(None, log_dirs=["/d"], kafka_client={"sasl.password": SASL, "n": {"x": 1}})
    assert SASL not in str(e.value)


def test_topic_manager_config_hides_and_reveals_for_librdkafka(tmp_path: Path) -> None:
    props = {"broker.id": 1, "log.dir": str(tmp_path), "bootstrap.servers": "127.0.0.1:9",
             "remote.log.metadata.common.client.sasl.password": RLMM_SASL,
             "remote.log.metadata.producer.ssl.key.password": SSL_KEY}
    cfg = TopicRlmmConfig.from_mapping(props)
    assert RLMM_SASL not in repr(cfg) and SSL_KEY not in repr(cfg) + cfg.model_dump_json()
    assert cfg.producer_config()["sasl.password"] == RLMM_SASL
    assert cfg.producer_config()["ssl.key.password"] == SSL_KEY
    assert cfg.admin_config()["sasl.password"] == RLMM_SASL and "ssl.key.password" not in cfg.admin_config()
    with pytest.raises(ConfigError) as e:
        TopicRlmmConfig.from_mapping({**props, "remote.log.metadata.topic.num.partitions": 0})
    assert RLMM_SASL not in str(e.value) and SSL_KEY not in str(e.value)


def test_fsspec_credentials_become_secret_options(tmp_path: Path) -> None:
    rsm = rsm_plugins.load("fsspec", {"url": f"file://{tmp_path}", "storage_options": {"auto_mkdir": True,
                                                                                       "token": TOKEN}})
    assert isinstance(rsm, FsspecRemoteStorageManager)
    assert rsm.config.storage_options == {"auto_mkdir": True}
    assert rsm.config.secret_options["token"].get_secret_value() == TOKEN
    assert TOKEN not in repr(rsm.config)
    rsm.close()


@pytest.mark.s3
def test_nothing_the_daemon_prints_or_writes_holds_a_secret(
    tmp_path: Path, moto_server: MotoServer, moto_bucket: str
) -> None:
    logs, work = tmp_path / "logs", tmp_path / "work"
    write_partition(logs, "sec", 0, 100)  # a few 64 KiB segments
    doc = {
        "log_dirs": [str(logs)],
        "work_dir": str(work),
        "log_level": "debug",
        "http": {"enabled": False},
        "topic_defaults": {"remote.storage.enable": True},
        "kafka_client": {"sasl.password": SASL, "ssl.key.password": SSL_KEY},
        "storage": {"plugin": "s3", "config": {
            "bucket": moto_bucket, "endpoint.url": moto_server.endpoint_url, "region": "us-east-1",
            "path.style": True, "access.key.id": ACCESS_KEY, "secret.access.key": S3_SECRET}},
    }
    cfg_file = tmp_path / "rlm.yaml"
    cfg_file.write_text(yaml.safe_dump(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}

    def rlm(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rlm.cli", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env={**env, **(extra_env or {})})

    ok = rlm("run", "--once", "--config", str(cfg_file),
             extra_env={"RLM_KAFKA_CLIENT": json.dumps({"sasl.oauthbearer.client.secret": ENV_SECRET})})
    assert ok.returncode == 0, ok.stderr[-3000:]
    status = rlm("status", "--json", "--work-dir", str(work))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["partitions"]["sec-0"]["remote_end"] >= 0  # it really tiered to S3
    # a secret-named key the file manager does not know: a configuration error that must not echo it
    failed = rlm("run", "--once", "--config", str(cfg_file),
                 extra_env={"RLM_METADATA__CONFIG__SNAPSHOT_PASSWORD_HINT": ENV_SECRET})
    doc["storage"]["config"]["bucket"] = "x"  # type: ignore[index]
    cfg_file.write_text(yaml.safe_dump(doc))
    invalid = rlm("run", "--once", "--config", str(cfg_file))
    assert failed.returncode == invalid.returncode == 3, failed.stderr + invalid.stderr
    assert "snapshot_password_hint" in failed.stderr.lower() and "bucket" in invalid.stderr

    printed = "".join(r.stdout + r.stderr for r in (ok, status, failed, invalid))
    assert '"event": "segment_copied"' in printed  # the debug log was really there to search
    written = "".join(p.read_text(errors="replace") for p in work.rglob("*") if p.is_file())
    leaks = [s for s in ALL if s in printed or s in written]
    assert not leaks, leaks
