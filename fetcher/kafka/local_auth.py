"""Standalone mode (no broker to ask): a static user list with SCRAM credentials and per-topic
allow rules from ``read.kafka_security``.

Why SCRAM hashes and never passwords: the file then holds only what Kafka's own metadata holds
(``salt``, ``stored_key``, ``server_key``, ``iterations``, Kafka's ScramCredentialUtils text), which
verifies a login but cannot be replayed as one. Both SCRAM (RFC 5802/7677, the server side) and
PLAIN (the password is salted and hashed with the stored salt, then compared) are checked against
them. Authorization: a principal may DESCRIBE and READ a topic (or READ a group) when one of its
``allow`` rules matches the name (shell patterns); nothing else is allowed.

What a login reveals: nothing about which users exist. An unknown user (or one without a
credential for the mechanism) gets a made-up credential derived by HMAC from a random secret of
this process, so its SCRAM salt is the same on every attempt within the process (as Kafka's
fake salts are) yet cannot be computed from the name; and the same work is done for it as for a
real user (PLAIN hashes the password for both mechanisms, real or made-up, always; the made-up
credential has Kafka's default 4096 iterations, so a real credential with another count is the
one difference left). The PBKDF2 of PLAIN runs on a small thread pool of its own, never on the
event loop (it took 12-23 ms a login there, stalling every client); the pool's queue is bounded
by the listener, which handles one request at a time per unauthenticated connection and caps
those connections. User names are parsed by :func:`fetcher.cluster_auth.principal_of`, as for the
relay (one parser, one set of rules).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fetcher.cluster_auth import AllowRules, principal_of
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

_ALGO = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: the key of the made-up credentials of unknown users: random per process, never stored or shown
_SERVER_SECRET = secrets.token_bytes(32)
_FAKE_ITERATIONS = 4096  # Kafka's default (and scram_credential's)
_HASH_THREADS = 2


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
        self._hashing = ThreadPoolExecutor(max_workers=_HASH_THREADS, thread_name_prefix="kafka-login-hash")

    def exchange(self, mechanism: str) -> LocalExchange:
        return LocalExchange(self, mechanism)

    def credential(self, user: str, mechanism: str) -> tuple[ScramCredential, bool]:
        """The user's credential for ``mechanism`` and True, or a made-up one and False. The
        made-up one is derived for every user, real or not: the same work either way."""
        fake = fake_credential(user, mechanism)
        cred = self.creds.get((user, mechanism))
        if cred is not None:
            return cred, True
        return fake, False

    async def hash(self, fn: Any, *args: Any) -> Any:
        """Run a password hash on the login pool (off the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(self._hashing, fn, *args)

    def topic_ops(self, principal: str, names: list[str]) -> dict[str, int]:
        return self.rules.topic_ops(principal, names)

    def group_read(self, principal: str, group: str) -> bool:
        return self.rules.group_read(principal, group)

    def close(self) -> None:
        self._hashing.shutdown(wait=False, cancel_futures=True)


def fake_credential(user: str, mechanism: str) -> ScramCredential:
    """A made-up credential for a user that does not exist: the same for a name within this
    process, not computable from the name without the process's secret, matching no password."""
    algo = _ALGO[mechanism]

    def derive(label: bytes, n: int) -> bytes:
        msg = b"\0".join((label, mechanism.encode(), user.encode()))
        return hmac.digest(_SERVER_SECRET, msg, algo)[:n]

    size = hashlib.new(algo).digest_size
    return ScramCredential(
        derive(b"salt", 24), derive(b"stored", size), derive(b"server", size), _FAKE_ITERATIONS
    )


def _plain_matches(password: bytes, creds: list[tuple[str, ScramCredential, bool]]) -> bool:
    """Whether ``password`` matches one of the real credentials; every credential (real or
    made-up) is hashed, whatever the outcome, so the time taken does not tell which exist."""
    ok = False
    for algo, cred, real in creds:
        salted = hashlib.pbkdf2_hmac(algo, password, cred.salt, cred.iterations)
        stored = hashlib.new(algo, hmac.digest(salted, b"Client Key", algo)).digest()
        ok |= hmac.compare_digest(stored, cred.stored_key) and real
    return ok


class LocalExchange:
    """One login against the static users: ``await step(token)`` -> (error or None, server bytes, done)."""

    def __init__(self, users: LocalUsers, mechanism: str) -> None:
        self.users = users
        self.mechanism = mechanism
        self.user: str | None = None
        self._state: dict[str, Any] = {}

    async def step(self, token: bytes) -> tuple[str | None, bytes, bool]:
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        if not self._state:
            return self._scram_first(token)
        return self._scram_final(token)

    async def _plain(self, token: bytes) -> tuple[str | None, bytes, bool]:
        user = principal_of("PLAIN", token)
        if user is None:
            return "invalid PLAIN client message", b"", True
        password = token.split(b"\0")[2]
        creds = [(algo, *self.users.credential(user, mech)) for mech, algo in _ALGO.items()]
        if await self.users.hash(_plain_matches, password, creds):
            self.user = user
            return None, b"", True
        return _INVALID, b"", True

    def _scram_first(self, token: bytes) -> tuple[str | None, bytes, bool]:
        user = principal_of(self.mechanism, token)
        fields = token.decode(errors="replace").split(",")
        if user is None or not fields[3].startswith("r=") or len(fields[3]) < 3:
            return "invalid SCRAM client-first message", b"", True
        cred, real = self.users.credential(user, self.mechanism)
        nonce = fields[3][2:] + base64.b64encode(os.urandom(18)).decode()
        server_first = f"r={nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        bare = ",".join(fields[2:])
        self._state = {
            "user": user,
            "cred": cred,
            "real": real,
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
        cred: ScramCredential = st["cred"]
        if not sep or f.get("r") != st["nonce"]:
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
        # the same check for a made-up credential (it matches no proof): no shortcut to time
        matches = hmac.compare_digest(hashlib.new(algo, client_key).digest(), cred.stored_key)
        if not (matches and st["real"]):
            return _INVALID, b"", True
        self.user = st["user"]
        server_sig = base64.b64encode(hmac.digest(cred.server_key, auth_message, algo)).decode()
        return None, f"v={server_sig}".encode(), True


_INVALID = "Authentication failed during authentication due to invalid credentials"
