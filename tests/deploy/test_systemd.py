"""deploy/systemd: the unit passes ``systemd-analyze verify`` and keeps its hardening, and its example
config is valid and agrees with it (log dirs read-only, work dir writable, stop timeout > drain time)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.config import load_config
from tests.deploy.conftest import DEPLOY, apt_install_tool

UNIT = DEPLOY / "systemd" / "rlm.service"
CONFIG = DEPLOY / "systemd" / "rlm.yaml"


def directives() -> list[tuple[str, str, str]]:
    """(section, key, value) in order; systemd allows a key several times, so no dict."""
    out, section = [], ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def values(key: str) -> list[str]:
    return [v for s, k, v in directives() if k == key and s == "Service"]


def one(key: str) -> str:
    vs = values(key)
    assert len(vs) == 1, f"{key}: {vs}"
    return vs[0]


def seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "min": 60, "m": 60, "": 1}
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return float(num) * units[text[len(num) :]]


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = apt_install_tool("systemd-analyze", "systemd")
    if tool is None:
        pytest.skip("systemd-analyze is missing and cannot be installed here (needs root and apt-get)")
    # verify checks that ExecStart's binary exists: point it at this checkout's real `rlm` entry point.
    rlm_bin = Path(sys.executable).with_name("rlm")
    assert rlm_bin.exists(), rlm_bin
    text = UNIT.read_text()
    assert "ExecStart=/opt/rlm/bin/rlm " in text
    unit = tmp_path / "rlm.service"
    unit.write_text(text.replace("ExecStart=/opt/rlm/bin/rlm ", f"ExecStart={rlm_bin} "))
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "notice"}
    res = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, env=env)
    problems = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 0 and not problems, "\n".join(problems)


def test_hardening() -> None:
    assert one("ProtectSystem") == "strict"
    assert one("NoNewPrivileges") == "yes"
    assert one("ProtectHome") == "yes"
    assert one("PrivateTmp") == "yes"
    assert one("CapabilityBoundingSet") == ""
    assert one("Restart") in {"on-failure", "always"}
    assert "2" in one("RestartPreventExitStatus").split(), "a configuration error must not restart-loop"
    assert one("User") not in {"root", "0"}
    assert one("KillSignal") == "SIGTERM"


def test_unit_agrees_with_example_config() -> None:
    cfg = load_config(CONFIG)
    read_only = " ".join(values("ReadOnlyPaths")).split()
    writable = " ".join(values("ReadWritePaths")).split()
    for d in cfg.log_dirs:
        assert any(str(d) == p or str(d).startswith(p.rstrip("/") + "/") for p in read_only), d
        assert not any(str(d).startswith(p) for p in writable), f"{d} must not be writable"
    assert str(cfg.work_dir) in writable
    assert one("WorkingDirectory") == str(cfg.work_dir)
    assert seconds(one("TimeoutStopSec")) > cfg.shutdown_timeout_s + 5, "systemd must not SIGKILL a drain"
    assert cfg.http.host == "0.0.0.0"
    assert "rlm run --config /etc/rlm/rlm.yaml" in one("ExecStart")


def test_no_secrets_in_example_config() -> None:
    cfg = load_config(CONFIG)
    assert "access_key_id" not in cfg.storage.config and "secret_access_key" not in cfg.storage.config


def test_config_env_file_is_optional() -> None:
    assert one("EnvironmentFile").startswith("-"), "a missing /etc/rlm/rlm.env must not stop the unit"


def test_security_exposure_is_low(tmp_path: Path) -> None:
    """``systemd-analyze security`` scores an offline unit file; keep the exposure level low (<= 2.5)."""
    tool = apt_install_tool("systemd-analyze", "systemd")
    if tool is None:
        pytest.skip("systemd-analyze is missing and cannot be installed here (needs root and apt-get)")
    rlm_bin = Path(sys.executable).with_name("rlm")
    unit = tmp_path / "rlm.service"
    unit.write_text(UNIT.read_text().replace("/opt/rlm/bin/rlm ", f"{rlm_bin} "))
    res = subprocess.run(
        [tool, "security", "--offline=yes", "--threshold=25", str(unit)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
