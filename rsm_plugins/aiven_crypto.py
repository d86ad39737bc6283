"""Decryption of Aiven tiered-storage objects: RSA-unwrapped data keys, AES-256-GCM chunks.

Each segment has its own 32-byte AES key (DEK), wrapped with the RSA public key of a key pair
named by id (``<keyPairId>:`` in the manifest, so keys can be rotated while old segments stay
readable), using OAEP with SHA3-512 for both the hash and MGF1 — BouncyCastle's
``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``. ``cryptography`` refuses OAEP with SHA-3 on current
OpenSSL, so this uses pycryptodome (the ``aiven`` extra). Every chunk and every non-empty index
is ``IV(12) ‖ ciphertext ‖ tag(16)`` under that DEK with the manifest's AAD; a tag that does not
verify is a :class:`ChunkIntegrityError` naming the object and chunk, never plaintext.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .api import ChunkIntegrityError, ConfigError, DataKeyError, PluginLoadError

NONCE_BYTES = 12
TAG_BYTES = 16
#: bytes an encrypted chunk has more than its plaintext
OVERHEAD = NONCE_BYTES + TAG_BYTES
_DEK_BYTES = 32


def _crypto() -> Any:
    try:
        from Crypto.Cipher import AES, PKCS1_OAEP
        from Crypto.Hash import SHA3_512
        from Crypto.PublicKey import RSA
        from Crypto.Signature.pss import MGF1
    except ImportError as e:  # pragma: no cover - the extra is part of [all]
        raise PluginLoadError(
            "reading encrypted Aiven segments needs pycryptodome: pip install 'kafka-rlm-sidecar[aiven]'"
        ) from e
    return AES, PKCS1_OAEP, SHA3_512, RSA, MGF1


@dataclass(frozen=True, slots=True)
class SegmentCipher:
    """The unwrapped data key and AAD of one segment."""

    key: bytes
    aad: bytes

    def decrypt(self, data: bytes | memoryview, object_key: str, chunk: int) -> bytes:
        """Authenticate and decrypt one stored chunk; :class:`ChunkIntegrityError` if it fails."""
        AES = _crypto()[0]
        if len(data) < OVERHEAD:
            raise ChunkIntegrityError(
                f"{object_key}: chunk {chunk} has {len(data)} bytes, fewer than an AES-GCM chunk's "
                f"{OVERHEAD}-byte IV and tag", object_key=object_key, chunk=chunk)
        view = memoryview(data)
        cipher = AES.new(self.key, AES.MODE_GCM, nonce=bytes(view[:NONCE_BYTES]))
        cipher.update(self.aad)
        try:
            out: bytes = cipher.decrypt_and_verify(view[NONCE_BYTES:-TAG_BYTES], view[-TAG_BYTES:])
        except ValueError:
            raise ChunkIntegrityError(
                f"{object_key}: chunk {chunk} fails AES-GCM authentication (altered bytes, or a data "
                "key that is not this segment's)", object_key=object_key, chunk=chunk) from None
        return out


class KeyRing:
    """The configured RSA private keys by key-pair id; keys are read from their PEM files once.

    Picklable for Spark executors: only the paths travel, each process reads the files again
    (so the key files must exist where the executors run, as they must on every broker).
    """

    def __init__(self, private_key_files: dict[str, Path]) -> None:
        self.private_key_files = dict(private_key_files)
        self._keys: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"private_key_files": self.private_key_files}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["private_key_files"])  # type: ignore[misc]

    def check(self) -> None:
        """Read every key now, so a bad path or PEM is a :class:`ConfigError` at start-up."""
        for key_id in self.private_key_files:
            self._key(key_id, ConfigError)

    def _key(self, key_id: str, error: type[Exception] = DataKeyError) -> Any:
        with self._lock:
            key = self._keys.get(key_id)
        if key is not None:
            return key
        path = self.private_key_files.get(key_id)
        if path is None:
            known = ", ".join(sorted(self.private_key_files)) or "none"
            raise error(f"data key wrapped with key pair {key_id!r}, which is not configured "
                        f"(configured: {known}; add encryption.key.pairs.{key_id}.private.key.file)")
        RSA = _crypto()[3]
        try:
            key = RSA.import_key(path.read_bytes())
        except (OSError, ValueError, IndexError, TypeError) as e:
            raise error(f"key pair {key_id!r}: cannot read private key {path}: {e}") from None
        if not key.has_private():
            raise error(f"key pair {key_id!r}: {path} holds a public key, not a private key")
        with self._lock:
            self._keys[key_id] = key
        return key

    def unwrap(self, key_pair_id: str, wrapped: bytes, aad: bytes, what: str) -> SegmentCipher:
        """The segment's cipher; :class:`DataKeyError` for an unknown id or the wrong private key."""
        _, PKCS1_OAEP, SHA3_512, _, MGF1 = _crypto()
        key = self._key(key_pair_id)
        oaep = PKCS1_OAEP.new(key, hashAlgo=SHA3_512, mgfunc=lambda x, y: MGF1(x, y, SHA3_512))
        try:
            dek: bytes = oaep.decrypt(wrapped)
        except (ValueError, TypeError):
            raise DataKeyError(
                f"{what}: the data key does not unwrap with key pair {key_pair_id!r} "
                f"({self.private_key_files[key_pair_id]}): not the private key it was wrapped for"
            ) from None
        if len(dek) != _DEK_BYTES:
            raise DataKeyError(f"{what}: unwrapped data key has {len(dek)} bytes, not {_DEK_BYTES}")
        return SegmentCipher(dek, aad)
