"""Secure by default: the one rule that decides whether a read face may listen in plaintext.

Why refuse: the Kafka-protocol endpoint and the HTTP API serve every tiered topic; bound to an
address other machines reach with neither TLS nor authentication, they bypass the cluster's
listeners and ACLs. So ``rlm serve`` and ``rlm kafka-serve`` do not start such a face, and
``rlm check`` reports it as failed, from this same function, unless the operator says another
boundary protects it (a private network, a mesh with mTLS): ``--allow-plaintext`` or
``read.allow_plaintext: true``. Loopback binds (127.0.0.0/8, ::1, ``localhost``) are always allowed.

Authentication means SASL (Basic for the HTTP API) on either face, and for the HTTP API also
bearer tokens (``read.http_security.bearer_tokens*``) or the static token (``read.http_token_*``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from rlm.config import DaemonConfig, ListenerSecurity
from rlm.errors import ConfigError

#: what secures each face, as the refusal names it
_FIX = {
    "read.kafka_security": "read.kafka_security (TLS and/or SASL)",
    "read.http_security": "read.http_security (TLS, SASL or bearer tokens) or "
    "read.http_token_env/http_token_file",
}


@dataclass(frozen=True)
class Face:
    """One read face as it will listen: what it is called, the setting that secures it, where."""

    name: str  # "kafka endpoint" / "http api"
    setting: str  # the configuration key that secures it
    host: str
    sec: ListenerSecurity
    static_token: bool = False  # the HTTP API's read.http_token_* (one token for everything)

    @property
    def authenticated(self) -> bool:
        sec = self.sec
        return sec.sasl or self.static_token or bool(sec.bearer_tokens) or sec.bearer_tokens_file is not None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (a name other than ``localhost``
    may resolve anywhere, so it is not; "" binds every interface)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def kafka_face(config: DaemonConfig, host: str | None = None) -> Face:
    """The Kafka-protocol endpoint bound on ``host`` (default ``read.kafka_host``)."""
    read = config.read
    return Face("kafka endpoint", "read.kafka_security", read.kafka_host if host is None else host,
                read.kafka_security)


def http_face(config: DaemonConfig) -> Face:
    """The HTTP API bound on ``read.http_host``."""
    read = config.read
    return Face("http api", "read.http_security", read.http_host, read.http_security,
                bool(read.http_token_env or read.http_token_file))


def plaintext_beyond_loopback(face: Face) -> bool:
    """The one rule: bound beyond loopback with neither TLS nor authentication."""
    return not face.sec.tls and not face.authenticated and not is_loopback(face.host)


def allowed(config: DaemonConfig, flag: bool) -> bool:
    """Whether plaintext beyond loopback was allowed (``--allow-plaintext`` or the config key)."""
    return flag or config.read.allow_plaintext


def refuse_plaintext(config: DaemonConfig, faces: list[Face], flag: bool) -> None:
    """Raise :class:`ConfigError` (one line: what, why, what to add; exit status 3) for the first
    face that would listen in plaintext beyond loopback, unless that was allowed."""
    if allowed(config, flag):
        return
    for face in faces:
        if plaintext_beyond_loopback(face):
            raise ConfigError(
                f"the {face.name} would listen on {face.host} with neither TLS nor authentication, so anyone "
                f"who reaches it reads every tiered topic: configure {_FIX[face.setting]}, bind a loopback "
                "address, or, if another boundary protects it, pass --allow-plaintext (or set "
                "read.allow_plaintext: true)"
            )
