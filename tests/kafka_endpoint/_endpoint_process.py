"""An endpoint in its own process, for tests whose Kafka clients run in the test process.

Why not a thread of the test process: confluent-kafka calls ``rd_kafka_assign`` from its rebalance
callback while holding the GIL, and that call can wait for librdkafka's fetcher to stop — which
waits for the endpoint's answer to an in-flight Fetch. An endpoint on a thread of the same
interpreter needs the GIL to send that answer: the process deadlocks (seen once in CI, members
stuck in ``Consumer.close()``). A real deployment never shares an interpreter with its clients;
neither do these tests.

The test keeps a small window into the child for what only the coordinator knows (who owns a
group, whether it exists, a KIP-848 group's epoch and size), asked over a pipe.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_START_S = 120.0
_ASK_S = 30.0


def _serve(conn: Connection, log_dir: str, work: str, state_dir: str, settings: dict[str, Any]) -> None:
    from fetcher import RemoteFetcher
    from fetcher.kafka import EndpointThread, ListenerSettings
    from tests.daemon.test_standalone import cfg_for

    fetcher = RemoteFetcher.from_config(cfg_for(Path(log_dir), Path(work)))
    ep = EndpointThread(fetcher, ListenerSettings(**{"port": 0, "merged": False, **settings}),
                        Path(state_dir))
    conn.send((ep.port, ep.bootstrap))
    ctx = ep.endpoint.ctx
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            what, group = msg
            if what == "coordinator":
                conn.send(ctx.coordinator_for(group)[0])
            elif what == "classic":
                conn.send(ctx.groups.describe(group) is not None)
            else:  # "consumer": a KIP-848 group's (epoch, members) or None
                g = ctx.consumer_groups.describe(group)
                conn.send(None if g is None else (g.epoch, len(g.members)))
    except EOFError:
        return
    finally:
        ep.close()
        fetcher.close()


class EndpointProcess:
    """``rlm kafka-serve`` as the tests need it: own process, the fixture's tiered log dir."""

    def __init__(self, log_dir: Path, work: Path, state_dir: Path, settings: dict[str, Any]) -> None:
        mp = multiprocessing.get_context("spawn")  # no fork of a process with Spark/JVM threads
        self._conn, child = mp.Pipe()
        self._lock = threading.Lock()  # one question at a time (tests ask from watcher threads)
        self._proc = mp.Process(target=_serve, args=(child, str(log_dir), str(work), str(state_dir),
                                                     settings), daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(_START_S):
            self.close()
            raise RuntimeError(f"the endpoint process did not start in {_START_S:.0f} s")
        self.port, self.bootstrap = self._conn.recv()

    def _ask(self, what: str, group: str) -> Any:
        with self._lock:
            self._conn.send((what, group))
            if not self._conn.poll(_ASK_S):
                raise RuntimeError(f"the endpoint process did not answer {what!r} in {_ASK_S:.0f} s")
            return self._conn.recv()

    def coordinator_for(self, group: str) -> int:
        """The node id (index in ``peers``) that coordinates ``group``."""
        return int(self._ask("coordinator", group))

    def has_classic_group(self, group: str) -> bool:
        return bool(self._ask("classic", group))

    def consumer_group(self, group: str) -> tuple[int, int] | None:
        """A KIP-848 group's (epoch, number of members), or None when this process has none."""
        got = self._ask("consumer", group)
        return None if got is None else (int(got[0]), int(got[1]))

    def close(self) -> None:
        if self._proc.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(None)
            self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)
        self._conn.close()
