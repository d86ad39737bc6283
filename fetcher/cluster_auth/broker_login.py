"""The merged mode's login to the brokers: the same ``kafka_client`` settings librdkafka gets.

The endpoint forwards fetches over its own asyncio connections (kio frames), not through
librdkafka, so the security settings every other Kafka connection of the sidecar takes from
``kafka_client`` are applied here: TLS (``security.protocol`` SSL / SASL_SSL with
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``enable.ssl.certificate.verification``, ``ssl.endpoint.identification.algorithm``) and SASL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) through SaslHandshake v1 + SaslAuthenticate v2, as
Kafka's own clients do (KIP-152). Settings this module cannot honour are refused when the
endpoint starts (a :class:`~rlm.errors.ConfigError` naming the setting) instead of silently
connecting without them. SCRAM follows RFC 5802/7677 and checks the server's signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as auth_req
from kio.schema.sasl_handshake.v1 import request as hs_req

from fetcher.cluster_auth.wire import make
from rlm.errors import ConfigError, DependencyUnavailableError

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_MECHANISMS = ("PLAIN", *_SCRAM)

#: sends one request on the connection being set up and returns the decoded response
Call = Callable[[Any], Awaitable[Any]]


class LoginRefusedError(DependencyUnavailableError):
    """The broker refused the configured SASL login (wrong user or password, mechanism off)."""

    retriable = False


@dataclass(frozen=True)
class BrokerLogin:
    """How to open and authenticate a connection to a broker."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = ""
    tls: ssl.SSLContext | None = None

    @classmethod
    def from_client_config(cls, conf: Mapping[str, Any]) -> BrokerLogin:
        """Read librdkafka-style settings (secrets in clear); unsupported ones are a ConfigError."""
        protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"kafka_client.security.protocol: {protocol!r} is not one of {', '.join(_PROTOCOLS)}"
            )
        mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
        if protocol.startswith("SASL_") and mechanism not in _MECHANISMS:
            raise ConfigError(
                f"kafka_client.sasl.mechanism: the Kafka endpoint's merged mode logs in with "
                f"{', '.join(_MECHANISMS)}, not {mechanism!r}"
            )
        tls = _tls_context(conf) if protocol.endswith("SSL") else None
        user, password = str(conf.get("sasl.username", "")), str(conf.get("sasl.password", ""))
        return cls(protocol, mechanism, user, password, tls)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    async def authenticate(self, call: Call, broker: str) -> None:
        """SaslHandshake + SaslAuthenticate on a fresh connection (nothing for non-SASL protocols)."""
        if not self.sasl:
            return
        hs = await call(make(hs_req.SaslHandshakeRequest, mechanism=self.mechanism))
        if hs.error_code != ErrorCode.none:
            raise LoginRefusedError(
                f"broker {broker} refused SASL mechanism {self.mechanism} "
                f"(enabled: {', '.join(hs.mechanisms) or 'none'})"
            )

        async def step(data: bytes) -> bytes:
            resp = await call(make(auth_req.SaslAuthenticateRequest, auth_bytes=data))
            if resp.error_code != ErrorCode.none:
                raise LoginRefusedError(
                    f"broker {broker} refused the login of {self.username!r} ({self.mechanism}): "
                    f"{resp.error_message or resp.error_code.name}"
                )
            return bytes(resp.auth_bytes)

        if self.mechanism == "PLAIN":
            await step(b"\0" + self.username.encode() + b"\0" + self.password.encode())
            return
        await _scram(step, _SCRAM[self.mechanism], self.username, self.password, broker)


def _tls_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=_opt(conf, "ssl.ca.location"))
    cert, key = _opt(conf, "ssl.certificate.location"), _opt(conf, "ssl.key.location")
    if cert is not None:
        ctx.load_cert_chain(cert, key, password=_opt(conf, "ssl.key.password"))
    if str(conf.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() in ("", "none"):
        ctx.check_hostname = False
    return ctx


def _opt(conf: Mapping[str, Any], key: str) -> str | None:
    value = conf.get(key)
    return None if value in (None, "") else str(value)


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


async def _scram(
    step: Callable[[bytes], Awaitable[bytes]], algo: str, user: str, password: str, broker: str
) -> None:
    """RFC 5802 client: client-first, server-first, client-final with proof, verify server-final."""
    nonce = base64.b64encode(os.urandom(24)).decode()
    first_bare = f"n={_saslname(user)},r={nonce}"
    server_first = (await step(f"n,,{first_bare}".encode())).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
    if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
        raise LoginRefusedError(f"broker {broker}: malformed SCRAM server-first message")
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", algo)
    stored_key = hashlib.new(algo, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, algo)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server_final = (await step(f"{without_proof},p={proof}".encode())).decode()
    expected = base64.b64encode(hmac.digest(hmac.digest(salted, b"Server Key", algo), auth_message, algo))
    if not hmac.compare_digest(server_final.encode(), b"v=" + expected):
        raise LoginRefusedError(f"broker {broker}: SCRAM server signature does not verify")
