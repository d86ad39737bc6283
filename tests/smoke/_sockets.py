"""Which addresses a process listens on, read from /proc (Linux), to check services stay on loopback."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


def _socket_inodes(pid: int) -> set[str]:
    out: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _decode(hex_addr: str) -> tuple[str, int]:
    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    # /proc/net prints the address as host-order 32-bit words
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port_hex, 16)


def listening_addresses(pid: int) -> list[tuple[str, str, int]]:
    """``(proto, ip, port)`` of every listening TCP socket and bound unconnected UDP socket of ``pid``."""
    inodes = _socket_inodes(pid)
    found: list[tuple[str, str, int]] = []
    for proto, state in (("tcp", _TCP_LISTEN), ("tcp6", _TCP_LISTEN), ("udp", _UDP_UNCONNECTED),
                         ("udp6", _UDP_UNCONNECTED)):
        table = Path(f"/proc/{pid}/net/{proto}")
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == state and cols[9] in inodes:
                ip, port = _decode(cols[1])
                found.append((proto, ip, port))
    return found


def non_loopback(pid: int) -> list[tuple[str, str, int]]:
    """The listening sockets of ``pid`` that are not bound to a loopback address."""
    return [a for a in listening_addresses(pid) if not ipaddress.ip_address(a[1]).is_loopback]
