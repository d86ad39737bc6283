"""rlm.config: file formats, env overrides, Kafka aliases, unknown keys, topic patterns, generated docs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.config import load_config
from rlm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_with_kafka_names(tmp_path: Path) -> None:
    f = tmp_path / "rlm.yaml"
    f.write_text(
        "log_dirs: [/var/kafka]\n"
        "remote.log.manager.task.interval.ms: 1500\n"
        "remote.log.manager.thread.pool.size: 3\n"
        "remote.log.manager.task.retry.backoff.ms: 100\n"
        "remote.log.manager.task.retry.backoff.max.ms: 900\n"
        "remote.log.manager.task.retry.jitter: 0.5\n"
        "remote.log.manager.copy.max.bytes.per.second: 1048576\n"
        "remote.log.index.file.cache.total.size.bytes: 1000\n"
        "remote.log.storage.manager.class.name: s3\n"
        "rsm.config.bucket: tiered\n"
        "rlmm.config.remote.log.metadata.topic.num.partitions: 5\n"
        "remote.log.metadata.topic.replication.factor: 1\n"
        "remote.partition.remover.task.interval.ms: 700\n"
        "remote.storage.enable: true\n"
        "retention.ms: 1000\n"
        "retention.bytes: 2000\n"
        "local.retention.ms: 300\n"
        "local.retention.bytes: 400\n"
    )
    c = load_config(f)
    assert (c.task_interval_ms, c.thread_pool_size, c.retry_backoff_ms, c.retry_backoff_max_ms) == (
        1500,
        3,
        100,
        900,
    )
    assert c.retry_jitter == 0.5 and c.copy_max_bytes_per_second == 1048576
    assert c.index_file_cache_total_size_bytes == 1000 and c.partition_remover_interval_ms == 700
    assert c.storage.plugin == "s3" and c.storage.config == {"bucket": "tiered"}
    assert c.metadata.config == {
        "remote.log.metadata.topic.num.partitions": 5,
        "remote.log.metadata.topic.replication.factor": 1,
    }
    t = c.topic_config("any")
    assert (t.remote_storage_enable, t.retention_ms, t.retention_bytes) == (True, 1000, 2000)
    assert (t.local_retention_ms, t.local_retention_bytes) == (300, 400)


def test_toml_and_topic_patterns(tmp_path: Path) -> None:
    f = tmp_path / "rlm.toml"
    f.write_text(
        'log_dirs = ["/d"]\n'
        "[topic_defaults]\nremote_storage_enable = true\nretention_ms = 100\n"
        '[[topics]]\npattern = "logs-*"\nretention_ms = 5\n'
        '[[topics]]\npattern = "logs-audit"\n"remote.storage.enable" = false\n'
    )
    c = load_config(f)
    assert c.topic_config("orders").retention_ms == 100
    assert c.topic_config("logs-x").retention_ms == 5
    audit = c.topic_config("logs-audit")
    assert audit.retention_ms == 5 and audit.remote_storage_enable is False
    # local.retention.* = -2 means "same as retention.*", as in Kafka
    assert c.topic_config("orders").local_retention_ms == 100


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "rlm.yaml"
    f.write_text("log_dirs: [/d]\ntask_interval_ms: 10\nstorage: {plugin: local, config: {root: /a}}\n")
    monkeypatch.setenv("RLM_TASK_INTERVAL_MS", "20")
    monkeypatch.setenv("RLM_STORAGE__CONFIG__FSYNC", "false")
    monkeypatch.setenv("RLM_HTTP__PORT", "0")
    c = load_config(f)
    assert c.task_interval_ms == 20 and c.http.port == 0
    assert c.storage.config == {"root": "/a", "fsync": "false"}


def test_precedence_explicit_env_file_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One order: explicit overrides > RLM_* env > file > defaults, Kafka names included."""
    f = tmp_path / "rlm.yaml"
    f.write_text(
        "log_dirs: [/d]\nremote.log.manager.task.interval.ms: 10\nthread_pool_size: 4\nretry_backoff_ms: 7\n"
    )
    monkeypatch.setenv("RLM_TASK_INTERVAL_MS", "20")
    monkeypatch.setenv("RLM_THREAD_POOL_SIZE", "5")
    c = load_config(f, task_interval_ms=30)
    assert c.task_interval_ms == 30  # explicit beats env and file
    assert c.thread_pool_size == 5  # env beats file
    assert c.retry_backoff_ms == 7  # file beats default
    assert c.retry_backoff_max_ms == 30000  # default
    c = load_config(f, **{"remote.log.manager.task.interval.ms": 40})
    assert c.task_interval_ms == 40  # explicit under its Kafka name still beats env
    monkeypatch.setenv("RLM_STORAGE__CONFIG__FSYNC", "false")
    c = load_config(f, storage={"plugin": "local", "config": {"root": "/x"}})
    assert c.storage.config == {"root": "/x", "fsync": "false"}  # nested blocks merge key by key


def test_defaults_unaffected_by_caller_environment() -> None:
    """Run under an exported RLM_* variable by the test below: the session fixture removes it."""
    c = load_config(None, log_dirs=["/d"])
    assert c.task_interval_ms == 30000 and c.storage.plugin == "local" and c.http.port == 9464


def test_exported_rlm_variable_does_not_change_a_test_run() -> None:
    env = {
        **os.environ,
        "RLM_TASK_INTERVAL_MS": "1",
        "RLM_STORAGE__PLUGIN": "s3",
        "RLM_HTTP__PORT": "1",
        "PYTHONPATH": str(ROOT),
    }
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         f"{Path(__file__).relative_to(ROOT)}::test_defaults_unaffected_by_caller_environment"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ("log_dirs: [/d]\nno_such_key: 1\n", "no_such_key"),
        ("log_dirs: [/d]\nstorage: {plugn: s3}\n", "storage.plugn"),
        ("log_dirs: [/d]\ntopics: [{pattern: a, retention_mss: 1}]\n", "topics[0].retention_mss"),
        ("log_dirs: [/d]\ntask_interval_ms: -5\n", "task_interval_ms"),
        ("log_dirs: 5\n", "log_dirs"),  # optional since the read side, but a list
        # remote compaction's memory cap: below the floor, negative, not a number
        ("log_dirs: [/d]\nremote_compaction_memory_bytes: 1024\n", "remote_compaction_memory_bytes"),
        ("log_dirs: [/d]\nremote_compaction_memory_bytes: -1\n", "remote_compaction_memory_bytes"),
        ("log_dirs: [/d]\nremote_compaction_memory_bytes: lots\n", "remote_compaction_memory_bytes"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, doc: str, key: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(doc)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert key in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize(
    ("doc", "wanted"),
    [
        # the key as the user wrote it (Kafka name), the bad value, no pydantic field name
        (
            "log_dirs: [/d]\nremote.log.manager.task.interval.ms: 5s\n",
            ["remote.log.manager.task.interval.ms = '5s'", "valid integer"],
        ),
        (
            "log_dirs: [/d]\nremote.log.manager.task.intervl.ms: 5\n",
            ["unknown key 'remote.log.manager.task.intervl.ms'",
             "did you mean 'remote.log.manager.task.interval.ms'?"],
        ),
        ("log_dirs: [/d]\nretention.ms: soon\n", ["retention.ms = 'soon'"]),
        (
            "log_dirs: [/d]\ntopics: [{pattern: a, remote.storage.enabel: true}]\n",
            ["unknown key 'topics[0].remote.storage.enabel'", "did you mean 'remote.storage.enable'?"],
        ),
        ("log_dirs: [/d]\nthread_pool_sise: 3\n", ["did you mean 'thread_pool_size'?"]),
        ("log_dirs: [/d]\nkafka_client: {sasl.password: 3}\n", ["sasl.password = <hidden>"]),
    ],
)
def test_errors_in_the_users_words(tmp_path: Path, doc: str, wanted: list[str]) -> None:
    f = tmp_path / "rlm.yaml"
    f.write_text(doc)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: invalid configuration: ")
    for w in wanted:
        assert w in msg, msg
    assert "Input should be" not in msg and "task_interval_ms" not in msg


def test_env_error_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "rlm.yaml"
    f.write_text("log_dirs: [/d]\n")
    monkeypatch.setenv("RLM_TASK_INTERVAL_MS", "5s")
    monkeypatch.setenv("RLM_HTTP__PORT", "99999")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert "RLM_TASK_INTERVAL_MS (environment) = '5s'" in msg and "RLM_HTTP__PORT (environment)" in msg, msg


def test_plugin_config_errors_suggest_the_key() -> None:
    import rsm_plugins

    with pytest.raises(ConfigError) as e:
        rsm_plugins.load("s3", {"bukket": "b"})
    msg = str(e.value)
    assert "unknown key 'bukket' (did you mean 'bucket'?)" in msg and "bucket: required" in msg


def test_unparsable_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load_config(f)


def test_generated_docs_up_to_date() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    text = (ROOT / "docs" / "configuration.md").read_text()
    from rlm.config import DaemonConfig

    for name in DaemonConfig.model_fields:
        assert f"`{name}`" in text


def test_topic_store_inherits_the_cluster_login_unless_it_has_its_own() -> None:
    """The metadata topic on the daemon's own cluster needs the same TLS/SASL settings: given once in
    ``kafka_client``, they become the topic store's common client defaults; its own keys win, and a
    store on another cluster (its own bootstrap) gets none of them."""
    from rlm.plugin_setup import rlmm_settings
    from rlmm.topic_config import TopicRlmmConfig

    client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.password": "pw-1"}
    cfg = load_config(None, log_dirs=["/d"], bootstrap_servers="b:9092", kafka_client=client,
                      metadata={"manager": "topic", "config": {
                          "remote.log.metadata.common.client.sasl.mechanism": "SCRAM-SHA-512"}})
    tcfg = TopicRlmmConfig.from_mapping(rlmm_settings(cfg, 1))
    admin = tcfg.admin_config()
    assert admin["bootstrap.servers"] == "b:9092" and admin["security.protocol"] == "SASL_SSL"
    assert admin["sasl.password"] == "pw-1" and admin["sasl.mechanism"] == "SCRAM-SHA-512"
    assert tcfg.consumer_config()["sasl.password"] == "pw-1"
    assert "pw-1" not in repr(tcfg)

    other = cfg.model_copy(update={"metadata": cfg.metadata.model_copy(
        update={"config": {"bootstrap.servers": "other:9092"}})})
    assert "security.protocol" not in TopicRlmmConfig.from_mapping(rlmm_settings(other, 1)).admin_config()
