"""One record as one line of text, as ``kcat -f`` would print it: for people reading a terminal.

``Partition: P<TAB>Offset: O<TAB>Timestamp: ISO-8601<TAB>Key: K<TAB>Headers: k=v,...<TAB>Value: V``.
Keys, values and headers are shown as UTF-8 text where they decode; what does not decode, and
whatever would break the line apart (tab, newline, other control characters, a backslash), is
escaped the way Python writes bytes (``\\xff``, ``\\t``, ``\\n``, ``\\\\``), so each record stays
on one line and the escapes can be read back. Inside headers ``,`` and ``=`` are escaped too.
A null key, value or header value prints ``NULL`` (kcat's ``-Z``); an empty one prints nothing.
"""

from __future__ import annotations

from rlm.commands.readside import format_ts
from rlm.log.model import Record

NULL = "NULL"
_NAMED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape_char(c: str, extra: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    if c in extra or not c.isprintable():
        code = ord(c)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return c


def show(data: bytes | None, extra: str = "") -> str:
    """``data`` as printable one-line text (``NULL`` for ``None``); undecodable bytes as ``\\xNN``."""
    if data is None:
        return NULL
    text = data.decode("utf-8", errors="surrogateescape")
    out = []
    for c in text:
        if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(_escape_char(c, extra))
    return "".join(out)


def record_line(partition: int, r: Record) -> str:
    """The text line of data record ``r`` (no trailing newline)."""
    headers = ",".join(f"{show(k.encode('utf-8', 'surrogateescape'), ',=')}={show(v, ',=')}"
                       for k, v in r.headers)
    return (f"Partition: {partition}\tOffset: {r.offset}\tTimestamp: {format_ts(r.timestamp)}\t"
            f"Key: {show(r.key)}\tHeaders: {headers}\tValue: {show(r.value)}")
