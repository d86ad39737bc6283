"""Which configuration values are secrets, and how they stay hidden until a client library needs them.

Plugin blocks (``storage.config``, ``metadata.config``) and ``kafka_client`` are free-form
mappings, so the models cannot type each secret field. Instead every value whose key looks
like a credential (``sasl.password``, ``ssl.key.password``, ``secret_access_key``, ``token``,
``sasl.jaas.config``, ...) becomes a :class:`~pydantic.SecretStr` as soon as it is validated:
``repr``, logs, ``model_dump`` and the status file show ``**********``. The value is revealed
only at the edge, in the dictionary handed to librdkafka, boto3 or fsspec (:func:`reveal_all`).

Ground floor: imports nothing of the project.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

SECRET_KEY = re.compile(
    r"password|passwd|secret|token|credential|jaas[._]config|oauthbearer[._]config|key[._]pem"
    r"|private[._-]?key|access[._-]?key|api[._-]?key|kms[._-]?key|session[._-]?key",
    re.IGNORECASE,
)


def is_secret_key(key: object) -> bool:
    """True for a configuration key whose value must never be shown."""
    return isinstance(key, str) and SECRET_KEY.search(key) is not None


def hide_secrets(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with every secret-keyed value (at any depth) wrapped in :class:`SecretStr`."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out[key] = hide_secrets(value)
        elif is_secret_key(key) and value is not None and not isinstance(value, SecretStr):
            out[key] = SecretStr(str(value))
        else:
            out[key] = value
    return out


def reveal(value: Any) -> Any:
    """The clear value of a :class:`SecretStr`; anything else unchanged."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def reveal_all(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with every :class:`SecretStr` (at any depth) revealed: only for client libraries."""
    return {k: reveal_all(v) if isinstance(v, Mapping) else reveal(v) for k, v in mapping.items()}
