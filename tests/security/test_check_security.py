"""`rlm check`'s security lines: what each read face exposes; plaintext beyond loopback refused
unless --allow-plaintext."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.commands.security_check import security_checks
from rlm.config import load_config
from tests.security.certs import issue, make_ca

pytestmark = [pytest.mark.security]


def _checks(tmp: Path, allow: bool = False, **read: object) -> dict[str, tuple[bool, str]]:
    cfg = load_config(None, work_dir=str(tmp / "w"), read=read, bootstrap_servers=read.pop("bs", None))
    return {c.name: (c.ok, c.detail) for c in security_checks(cfg, allow)}


def test_plaintext_beyond_loopback_is_refused_unless_allowed(tmp_path: Path) -> None:
    assert _checks(tmp_path)["security:kafka"][0]  # defaults: loopback
    ok, detail = _checks(tmp_path, kafka_host="0.0.0.0")["security:kafka"]
    assert not ok and "--allow-plaintext" in detail
    assert not _checks(tmp_path, http_host="10.1.2.3")["security:http"][0]
    assert _checks(tmp_path, True, kafka_host="0.0.0.0")["security:kafka"][0]


def test_tls_and_sasl_are_reported_without_secrets(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    ks = issue(ca, tmp_path / "server.pem", "server")
    sec = {
        "security.protocol": "SASL_SSL",
        "ssl.keystore.location": str(ks),
        "ssl.key.password": "never-shown-77",
    }
    ok, detail = _checks(tmp_path, kafka_host="0.0.0.0", kafka_security=sec, bs="127.0.0.1:9092")[
        "security:kafka"
    ]
    assert ok and "SASL_SSL" in detail and "SCRAM-SHA-512" in detail and "never-shown-77" not in detail
    ok, detail = _checks(tmp_path, kafka_security=sec)["security:kafka"]
    assert not ok and "bootstrap_servers" in detail
    (tmp_path / "broken.pem").write_text("not a certificate")
    bad = {**sec, "ssl.keystore.location": str(tmp_path / "broken.pem")}
    ok, detail = _checks(tmp_path, kafka_security=bad, bs="127.0.0.1:9092")["security:kafka"]
    assert not ok and "cannot load" in detail
