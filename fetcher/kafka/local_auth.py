"""Standalone mode (no broker to ask): a static user list with SCRAM credentials and per-topic
allow rules from ``read.kafka_security``.

Why SCRAM hashes and never passwords: the file then holds only what Kafka's own metadata holds
(``salt``, ``stored_key``, ``server_key``, ``iterations``, Kafka's ScramCredentialUtils text), which
verifies a login but cannot be replayed as one. Both SCRAM (RFC 5802/7677, the server side) and
PLAIN (the password is salted and hashed with the stored salt, then compared) are checked against
them. Authorization: a principal may DESCRIBE and READ a topic (or READ a group) when one of its
``allow`` rules matches the name (shell patterns); nothing else is allowed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

from fetcher.acl import AllowRules
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

_ALGO = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def parse(cls, text: str, where: str) -> ScramCredential:
        try:
            f = dict(part.split("=", 1) for part in text.split(","))
            return cls(
                base64.b64decode(f["salt"]),
                base64.b64decode(f["stored_key"]),
                base64.b64decode(f["server_key"]),
                int(f["iterations"]),
            )
        except (KeyError, ValueError, binascii.Error) as e:
            raise ConfigError(
                f"{where}: not a SCRAM credential (salt=...,stored_key=...,server_key=...,iterations=N)"
            ) from e


def scram_credential(password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = 4096) -> str:
    """The credential text for ``read.kafka_security.users`` (what to store instead of a password)."""
    algo = _ALGO[mechanism]
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", algo)
    b64 = base64.b64encode
    return (
        f"salt={b64(salt).decode()},stored_key={b64(hashlib.new(algo, client_key).digest()).decode()},"
        f"server_key={b64(hmac.digest(salted, b'Server Key', algo)).decode()},iterations={iterations}"
    )


class LocalUsers:
    """Users, their credentials per mechanism, and allow rules."""

    def __init__(self, sec: ListenerSecurity) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {}
        for u in sec.users:
            for mech, text in (("SCRAM-SHA-256", u.scram_sha_256), ("SCRAM-SHA-512", u.scram_sha_512)):
                if text is not None:
                    where = f"read.kafka_security.users[{u.name}].{mech.lower()}"
                    self.creds[(u.name, mech)] = ScramCredential.parse(text.get_secret_value(), where)
        self.rules = AllowRules((r.principal, r.topics, r.groups) for r in sec.allow)

    def exchange(self, mechanism: str) -> LocalExchange:
        return LocalExchange(self, mechanism)

    def topic_ops(self, principal: str, names: list[str]) -> dict[str, int]:
        return self.rules.topic_ops(principal, names)

    def group_read(self, principal: str, group: str) -> bool:
        return self.rules.group_read(principal, group)


class LocalExchange:
    """One login against the static users: ``step(token)`` -> (error or None, server bytes, done)."""

    def __init__(self, users: LocalUsers, mechanism: str) -> None:
        self.users = users
        self.mechanism = mechanism
        self.user: str | None = None
        self._state: dict[str, Any] = {}

    def step(self, token: bytes) -> tuple[str | None, bytes, bool]:
        if self.mechanism == "PLAIN":
            return self._plain(token)
        if not self._state:
            return self._scram_first(token)
        return self._scram_final(token)

    def _plain(self, token: bytes) -> tuple[str | None, bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return "invalid PLAIN client message", b"", True
        user, password = parts[1].decode(errors="replace"), parts[2]
        for mech, algo in _ALGO.items():
            cred = self.users.creds.get((user, mech))
            if cred is None:
                continue
            salted = hashlib.pbkdf2_hmac(algo, password, cred.salt, cred.iterations)
            stored = hashlib.new(algo, hmac.digest(salted, b"Client Key", algo)).digest()
            if hmac.compare_digest(stored, cred.stored_key):
                self.user = user
                return None, b"", True
        return _INVALID, b"", True

    def _scram_first(self, token: bytes) -> tuple[str | None, bytes, bool]:
        text = token.decode(errors="replace")
        fields = text.split(",")
        if len(fields) < 4 or not fields[2].startswith("n=") or not fields[3].startswith("r="):
            return "invalid SCRAM client-first message", b"", True
        user = fields[2][2:].replace("=2C", ",").replace("=3D", "=")
        cred = self.users.creds.get((user, self.mechanism))
        # an unknown user gets a made-up salt, so the answer does not reveal who exists
        salt = cred.salt if cred is not None else hashlib.sha256(user.encode()).digest()[:24]
        iters = cred.iterations if cred is not None else 4096
        nonce = fields[3][2:] + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iters}"
        bare = ",".join(fields[2:])
        self._state = {
            "user": user,
            "cred": cred,
            "nonce": nonce,
            "first": bare,
            "server_first": server_first,
        }
        return None, server_first.encode(), False

    def _scram_final(self, token: bytes) -> tuple[str | None, bytes, bool]:
        st = self._state
        text = token.decode(errors="replace")
        without, sep, proof_b64 = text.rpartition(",p=")
        f = dict(p.split("=", 1) for p in without.split(",") if "=" in p)
        cred: ScramCredential | None = st["cred"]
        if not sep or f.get("r") != st["nonce"] or cred is None:
            return _INVALID, b"", True
        algo = _ALGO[self.mechanism]
        auth_message = f"{st['first']},{st['server_first']},{without}".encode()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            return _INVALID, b"", True
        signature = hmac.digest(cred.stored_key, auth_message, algo)
        if len(proof) != len(signature):
            return _INVALID, b"", True
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(algo, client_key).digest(), cred.stored_key):
            return _INVALID, b"", True
        self.user = st["user"]
        server_sig = base64.b64encode(hmac.digest(cred.server_key, auth_message, algo)).decode()
        return None, f"v={server_sig}".encode(), True


_INVALID = "Authentication failed during authentication due to invalid credentials"
