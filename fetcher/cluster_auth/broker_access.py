"""Connections to the cluster's brokers, shared by both read faces: where logins are relayed
(:class:`BrokerAccess`), a connection authenticated as one principal (:class:`BrokerSession`), and
the plain request/answer connection under both (:class:`BrokerConn`, also the merged mode's)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import dataclass
from typing import Any

from fetcher.cluster_auth.broker_login import BrokerLogin
from fetcher.cluster_auth.wire import encode_request, read_response


class BrokerConn:
    """A connection to a broker carrying one request at a time (its correlation ids checked)."""


    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.corr = 0
        self.idle_since = time.monotonic()
        self.versions: dict[int, tuple[int, int]] = {}  # the broker's ApiVersions answer (api -> range)

    def reusable(self, max_idle_s: float) -> bool:
        """Whether a pooled connection may carry another request: the broker has not closed it
        (restart, its ``connections.max.idle.ms``, a proxy), nothing unsolicited arrived, and it
        has not been idle past ``max_idle_s`` (closed first from this side, as Kafka's clients
        do with ``connections.max.idle.ms``)."""
        if self.writer.is_closing() or self.reader.at_eof() or self.reader.exception() is not None:
            return False
        return time.monotonic() - self.idle_since < max_idle_s

    async def call(self, req: Any, timeout_s: float) -> Any:
        self.corr += 1
        self.writer.write(encode_request(req, self.corr, "rlm-kafka-endpoint"))
        await self.writer.drain()
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout_s)
        (size,) = struct.unpack(">i", head)
        data = await asyncio.wait_for(self.reader.readexactly(size), timeout_s)
        corr, resp = read_response(type(req), data)
        if corr != self.corr:
            raise ConnectionError(f"broker answered correlation id {corr}, expected {self.corr}")
        return resp

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class BrokerAccess:
    """Where logins are relayed to: the cluster's bootstrap list and the TLS ``kafka_client`` sets."""

    bootstrap: tuple[tuple[str, int], ...]
    login: BrokerLogin
    timeout_s: float = 30.0

    @classmethod
    def from_client(cls, bootstrap_servers: str, login: BrokerLogin) -> BrokerAccess:
        addrs = tuple(host_port(b) for b in bootstrap_servers.split(",") if b.strip())
        return cls(addrs, login)

    async def connect(self) -> tuple[BrokerConn, str]:
        """An unauthenticated connection to the first broker that answers."""
        tls = self.login.tls
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                r, w = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None),
                    self.timeout_s,
                )
                return BrokerConn(r, w), f"{host}:{port}"
            except (OSError, TimeoutError) as e:
                last = e
        raise ConnectionError(f"no broker of {len(self.bootstrap)} reachable for the SASL relay: {last}")


class BrokerSession:
    """A broker connection authenticated as one principal; requests are serialized on it."""

    def __init__(self, conn: BrokerConn, broker: str, access: BrokerAccess) -> None:
        self.conn = conn
        self.broker = broker
        self._timeout = access.timeout_s
        self._lock = asyncio.Lock()

    async def call(self, req: Any) -> Any:
        async with self._lock:
            return await self.conn.call(req, self._timeout)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop already closed (server shut down)
            self.conn.close()


def host_port(text: str) -> tuple[str, int]:
    """(host, port) of ``host:port`` (an IPv6 host in brackets or not)."""
    host, _, port = text.strip().rpartition(":")
    return host.strip("[]"), int(port)
