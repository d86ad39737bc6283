"""The security part of ``rlm check``: what each read face exposes, and a refusal of plaintext
beyond loopback.

Why refuse: the Kafka endpoint and the HTTP API serve every tiered topic; bound to an address
other machines reach, with neither TLS nor SASL, they bypass the cluster's listeners and ACLs.
``--allow-plaintext`` records that the operator has another boundary (a private network, a
mesh with mTLS) and wants it anyway. The report never prints a secret, only where they come from.
"""

from __future__ import annotations

import ipaddress

from rlm.config import DaemonConfig, ListenerSecurity
from rlm.daemon.preflight import Check


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: may resolve anywhere


def _describe(sec: ListenerSecurity) -> str:
    parts = [f"security.protocol={sec.security_protocol}"]
    if sec.tls:
        parts.append(f"ssl.keystore.location={sec.ssl_keystore_location}")
        parts.append(f"ssl.client.auth={sec.ssl_client_auth}")
    if sec.sasl:
        parts.append(f"sasl.enabled.mechanisms={','.join(sec.sasl_enabled_mechanisms)}")
        parts.append(f"ACLs by the cluster, cached {sec.authz_cache_ms} ms")
    if sec.bearer_tokens or sec.bearer_tokens_file is not None:
        where = f" + {sec.bearer_tokens_file}" if sec.bearer_tokens_file is not None else ""
        parts.append(f"bearer tokens by SHA-256 ({len(sec.bearer_tokens)} listed{where})")
    return ", ".join(parts)


def _tls_loads(sec: ListenerSecurity) -> str | None:
    """None when the certificate, key and truststore load; else why not."""
    from fetcher.tls import ReloadingServerContext
    from rlm.errors import ConfigError

    try:
        ReloadingServerContext(sec, "check")
    except ConfigError as e:
        return str(e)
    return None


def security_checks(config: DaemonConfig, allow_plaintext: bool) -> list[Check]:
    read = config.read
    token = bool(read.http_token_env or read.http_token_file)
    out = []
    for name, setting, host, sec, extra in (
        ("kafka endpoint", "read.kafka_security", read.kafka_host, read.kafka_security, ""),
        (
            "http api",
            "read.http_security",
            read.http_host,
            read.http_security,
            ", static bearer token" if token else "",
        ),
    ):
        detail = f"{host}: {_describe(sec)}{extra}"
        ok = True
        if not sec.tls and not sec.sasl and not _loopback(host):
            if allow_plaintext:
                detail += " (plaintext beyond loopback, allowed by --allow-plaintext)"
            else:
                ok = False
                detail += (
                    " — reachable beyond loopback with neither TLS nor SASL: configure "
                    f"{setting} or pass --allow-plaintext"
                )
        if sec.sasl and not config.bootstrap_servers:
            ok = False
            detail += " — SASL needs bootstrap_servers (logins and ACLs are the cluster's)"
        if sec.tls:
            why = _tls_loads(sec)
            if why is not None:
                ok = False
                detail += f" — {why}"
        out.append(Check(f"security:{name.split()[0]}", setting, ok, detail))
    return out
