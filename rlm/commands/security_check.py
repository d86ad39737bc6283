"""The security part of ``rlm check``: what each read face exposes, and a refusal of plaintext
beyond loopback.

Why refuse: the Kafka endpoint and the HTTP API serve every tiered topic; bound to an address
other machines reach, with neither TLS nor authentication, they bypass the cluster's listeners
and ACLs. The rule is :func:`rlm.commands.serve_plaintext.plaintext_beyond_loopback`, the one
``rlm serve`` and ``rlm kafka-serve`` refuse to start by. ``--allow-plaintext`` (or
``read.allow_plaintext``) records that the operator has another boundary (a private network, a
mesh with mTLS) and wants it anyway. The report never prints a secret, only where they come from.
"""

from __future__ import annotations

from rlm.commands.serve_plaintext import allowed, http_face, kafka_face, plaintext_beyond_loopback
from rlm.config import DaemonConfig, ListenerSecurity
from rlm.daemon.preflight import Check


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
    out = []
    for face in (kafka_face(config), http_face(config)):  # the rule `rlm serve` / `kafka-serve` apply
        name, setting, host, sec = face.name, face.setting, face.host, face.sec
        detail = f"{host}: {_describe(sec)}{', static bearer token' if face.static_token else ''}"
        ok = True
        if plaintext_beyond_loopback(face):
            if allowed(config, allow_plaintext):
                detail += " (plaintext beyond loopback, allowed by --allow-plaintext / read.allow_plaintext)"
            else:
                ok = False
                detail += (
                    " — reachable beyond loopback with neither TLS nor authentication: configure "
                    f"{setting} or pass --allow-plaintext (read.allow_plaintext)"
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
