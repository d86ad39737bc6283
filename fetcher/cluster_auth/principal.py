"""The user a SASL login names: one parser of the first PLAIN and SCRAM messages for every path
(relayed logins, standalone users), with Kafka's rules (an authzid other than the user refused)."""

from __future__ import annotations


def principal_of(mechanism: str, token: bytes) -> str | None:
    """The user a first SASL message logs in as (PLAIN ``authzid\\0user\\0pass``, SCRAM
    ``n,,n=user,r=...``), or None when the token is not such a message."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        parts = text.split("\0")
        if len(parts) != 3 or not parts[1] or (parts[0] and parts[0] != parts[1]):
            return None
        return parts[1]
    fields = text.split(",")
    if len(fields) < 4 or fields[0] not in ("n", "y") or not fields[2].startswith("n="):
        return None
    name = fields[2][2:]
    if not name or "=" in name.replace("=2C", "").replace("=3D", ""):
        return None
    if fields[1] and fields[1] != f"a={name}":  # an authzid other than the user (as Kafka refuses)
        return None
    return name.replace("=2C", ",").replace("=3D", "=")
