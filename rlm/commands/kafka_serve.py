"""``rlm kafka-serve --config FILE [--listener HOST:PORT]``: the read-only Kafka-protocol endpoint.

Any Kafka client reads tiered history by setting ``bootstrap.servers`` to the listener
(default ``read.kafka_host``:``read.kafka_port``, 127.0.0.1:9466). SIGTERM/SIGINT stop it
(exit status 0); SIGHUP reloads the TLS certificate files. A listener beyond loopback with
neither TLS nor SASL is refused (exit 3) unless ``--allow-plaintext`` or ``read.allow_plaintext``
says another boundary protects it (docs/security.md). ``rlm serve --kafka-listener`` starts the
same listener with :func:`start_kafka_listener` beside the HTTP API.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from rlm.config import DaemonConfig, load_config
from rlm.errors import ConfigError, PluginLoadError

if TYPE_CHECKING:
    from fetcher.core import RemoteFetcher
    from fetcher.kafka.runner import EndpointThread

log = structlog.get_logger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "kafka-serve",
        help="serve tiered history over the Kafka protocol (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, help="YAML or TOML configuration file (RLM_* env overrides)")
    p.add_argument("--listener", metavar="HOST:PORT", help="bind address (default from read.kafka_host/port)")
    p.add_argument("--allow-plaintext", action="store_true",
                   help="serve beyond loopback with neither TLS nor authentication (also "
                   "read.allow_plaintext); refused otherwise, see docs/security.md")
    p.set_defaults(func=run)


def parse_listener(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--kafka-listener/--listener must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def start_kafka_listener(fetcher: RemoteFetcher, host: str | None = None, port: int | None = None,
                         state_dir: Path | None = None) -> EndpointThread:
    """Start the listener on its own thread; the handle's ``close()`` stops it, ``port`` is bound.

    Limits and the advertised address come from ``fetcher.read_config`` (``read.kafka_*``);
    committed offsets go to ``state_dir`` (default: the fetcher's work dir, ``kafka-endpoint/``).
    """
    from fetcher.kafka import EndpointThread, ListenerSettings

    settings = ListenerSettings.from_read_config(fetcher.read_config, host, port)
    try:
        return EndpointThread(fetcher, settings, state_dir or fetcher.work_dir / "kafka-endpoint")
    except OSError as e:
        raise ConfigError(
            f"Kafka listener (--kafka-listener / read.kafka_host, read.kafka_port): cannot listen on "
            f"{settings.host}:{settings.port}: {e}") from e


def kafka_extra_missing() -> str | None:
    """Why the Kafka endpoint cannot start in this install (the ``kafka`` extra), or ``None``."""
    try:
        import fetcher.kafka  # noqa: F401
    except ImportError as e:
        return ("the Kafka-protocol endpoint needs the 'kafka' extra "
                f"(pip install 'kafka-rlm-sidecar[kafka]'): {e}")
    return None


def serve_kafka_until_signal(config: DaemonConfig, host: str | None, port: int | None) -> int:
    """Serve the Kafka endpoint alone (own fetcher) until SIGTERM/SIGINT; exit status 0."""
    from fetcher.allocator import tune_allocator
    from fetcher.core import RemoteFetcher

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("shutdown_requested", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tune_allocator(config.read.allocator_mmap_threshold_bytes, config.read.allocator_trim_threshold_bytes)
    with RemoteFetcher.from_config(config) as fetcher:
        handle = start_kafka_listener(fetcher, host, port)
        signal.signal(signal.SIGHUP, lambda signum, frame: handle.reload_tls())  # rotated certificate
        print(f"kafka endpoint listening on {handle.bootstrap}", flush=True)
        try:
            while not stop.wait(1.0):
                pass
        finally:
            handle.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from rlm.commands.serve_plaintext import kafka_face, refuse_plaintext
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_format, config.log_level)
    missing = kafka_extra_missing()
    if missing is not None:
        raise PluginLoadError(missing)
    host, port = parse_listener(args.listener) if args.listener else (None, None)
    refuse_plaintext(config, [kafka_face(config, host)], args.allow_plaintext)  # before anything is opened
    return serve_kafka_until_signal(config, host, port)
