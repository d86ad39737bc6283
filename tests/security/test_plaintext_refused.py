"""Secure by default (issue 38, item 7): ``rlm serve`` and ``rlm kafka-serve`` do not start a read
face bound beyond loopback with neither TLS nor authentication, unless ``--allow-plaintext`` or
``read.allow_plaintext`` says another boundary protects it; ``rlm check`` applies the same rule.

The commands run as real processes (``python -m rlm.cli``) over a standalone configuration; a
refused one exits 3 (a configuration error, rlm/exit_codes.py) with one ``rlm: error:`` line and
never listens; an allowed one prints its listening line and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlm.commands.security_check import security_checks
from rlm.commands.serve_plaintext import http_face, kafka_face, refuse_plaintext
from rlm.config import load_config
from rlm.errors import ConfigError
from rlm.exit_codes import ExitCode
from tests.daemon.helpers import wait_for
from tests.security.certs import issue, make_ca

pytestmark = [pytest.mark.security]

LISTENING = "kafka endpoint listening on "


def _config(tmp: Path, **read: Any) -> Path:
    (tmp / "logs").mkdir(exist_ok=True)
    (tmp / "work" / "metadata").mkdir(parents=True, exist_ok=True)  # an empty file metadata store
    cfg = tmp / "rlm.yaml"
    cfg.write_text(yaml.safe_dump({"work_dir": str(tmp / "work"), "log_dirs": [str(tmp / "logs")],
                                   "read": read}))
    return cfg


def refused(*args: str) -> str:
    """Run a command that must be refused; its one stderr line."""
    proc = subprocess.run([sys.executable, "-m", "rlm.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == ExitCode.CONFIG, (proc.returncode, proc.stdout, proc.stderr)
    assert LISTENING not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlm: error: "), proc.stderr
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def starts(tmp: Path, *args: str, http_port: int | None = None) -> str:
    """Run a command that must start (its Kafka listener prints its address; with ``http_port``
    the HTTP API answers /health there); stop it with SIGTERM: exit 0. Returns the Kafka address."""
    err = tmp / f"stderr-{os.urandom(4).hex()}.log"
    with err.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "rlm.cli", *args], stdout=subprocess.PIPE,
                                stderr=err_file, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        address = ""
        for line in proc.stdout:
            if line.startswith(LISTENING):
                address = line[len(LISTENING):].strip()
                break
        assert address, f"exited {proc.wait(60)} without listening: {err.read_text()[-3000:]}"
        if http_port is not None:
            wait_for("the HTTP API", lambda: _healthy(http_port), timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, err.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return address


def test_kafka_serve_refuses_a_public_plaintext_listener(tmp_path: Path) -> None:
    line = refused("kafka-serve", "--config", str(_config(tmp_path)), "--listener", "0.0.0.0:0")
    assert "kafka endpoint" in line and "0.0.0.0" in line and "neither TLS nor authentication" in line
    assert "read.kafka_security" in line and "--allow-plaintext" in line and "read.allow_plaintext" in line
    # the configured bind address is checked as well as the command line's
    refused("kafka-serve", "--config", str(_config(tmp_path, kafka_host="0.0.0.0", kafka_port=0)))


def test_serve_refuses_either_face_public_in_plaintext(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
    line = refused("serve", "--config", cfg, "--host", "0.0.0.0", "--port", "0")
    assert "http api" in line and "read.http_security" in line and "--allow-plaintext" in line
    line = refused("serve", "--config", cfg, "--port", "0", "--kafka-listener", "0.0.0.0:0")
    assert "kafka endpoint" in line
    refused("serve", "--config", str(_config(tmp_path, http_host="::", http_port=0)))


def test_run_refuses_its_http_api_public_in_plaintext(tmp_path: Path) -> None:
    """`rlm run` with ``read.serve_http`` starts the same HTTP API as `rlm serve`: the same rule."""
    cfg = _config(tmp_path, serve_http=True, http_host="0.0.0.0", http_port=0)
    line = refused("run", "--config", str(cfg))
    assert "http api" in line and "read.allow_plaintext" in line


def test_loopback_binds_need_nothing(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
    address = starts(tmp_path, "kafka-serve", "--config", cfg, "--listener", "127.0.0.1:0")
    assert address.startswith("127.0.0.1:")
    port = _free_port()
    starts(tmp_path, "serve", "--config", cfg, "--port", str(port), "--kafka-listener", "127.0.0.1:0",
           http_port=port)


def test_allow_plaintext_by_flag_or_config_key(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
    starts(tmp_path, "kafka-serve", "--config", cfg, "--listener", "0.0.0.0:0", "--allow-plaintext")
    allowing = str(_config(tmp_path, allow_plaintext=True))
    port = _free_port()
    starts(tmp_path, "serve", "--config", allowing, "--host", "0.0.0.0", "--port", str(port),
           "--kafka-listener", "0.0.0.0:0", http_port=port)


def test_tls_or_authentication_is_enough(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    keystore = issue(ca, tmp_path / "server.pem", "server")
    tls = {"security.protocol": "SSL", "ssl.keystore.location": str(keystore)}
    cfg = str(_config(tmp_path, kafka_security=tls))
    starts(tmp_path, "kafka-serve", "--config", cfg, "--listener", "0.0.0.0:0")
    (tmp_path / "token").write_text("a-static-token-5f1e\n")
    cfg = str(_config(tmp_path, http_token_file=str(tmp_path / "token")))
    port = _free_port()
    starts(tmp_path, "serve", "--config", cfg, "--host", "0.0.0.0", "--port", str(port),
           "--kafka-listener", "127.0.0.1:0", http_port=port)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.example", "127.0.0.1", "127.9.9.9",
                                  "::1", "localhost"])
@pytest.mark.parametrize("secured", ["none", "tls", "sasl", "bearer", "token"])
@pytest.mark.parametrize("allow", [False, True])
def test_rlm_check_and_the_commands_agree(tmp_path: Path, host: str, secured: str, allow: bool) -> None:
    """One rule: a face `rlm check` fails for plaintext is exactly one the commands refuse."""
    ca_dir = tmp_path / "ca"
    options: dict[str, dict[str, Any]] = {
        "none": {},
        "tls": {"security.protocol": "SSL",
                "ssl.keystore.location": str(issue(make_ca(ca_dir), tmp_path / "s.pem", "s"))},
        "sasl": {"security.protocol": "SASL_PLAINTEXT"},
        "bearer": {"bearer_tokens": [{"principal": "User:a", "sha256": "0" * 64}]},
        "token": {},
    }
    sec = options[secured]
    read: dict[str, Any] = {"kafka_host": host, "http_host": host, "http_security": sec,
                            "allow_plaintext": allow}
    if secured != "bearer":
        read["kafka_security"] = sec
    if secured == "token":
        read["http_token_env"] = "RLM_TEST_TOKEN"
    cfg = load_config(None, work_dir=str(tmp_path / "w"), read=read, bootstrap_servers="127.0.0.1:9")
    checks = {c.name: c for c in security_checks(cfg, False)}
    faces = ((kafka_face(cfg), checks["security:kafka"]), (http_face(cfg), checks["security:http"]))
    for face, check in faces:
        try:
            refuse_plaintext(cfg, [face], False)
            refusal = False
        except ConfigError:
            refusal = True
        plaintext_failure = not check.ok and "neither TLS nor authentication" in check.detail
        assert refusal == plaintext_failure, (face.name, host, secured, allow, check.detail)
        public = host not in ("127.0.0.1", "127.9.9.9", "::1", "localhost")
        unsecured = secured == "none" or (secured in ("bearer", "token") and face.name == "kafka endpoint")
        assert refusal == (public and unsecured and not allow), (face.name, host, secured, allow)
