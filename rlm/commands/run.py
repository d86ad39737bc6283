"""``rlm run --config FILE [--once]``: run the RemoteLogManager daemon beside a broker.

Signals: the first SIGTERM/SIGINT stops taking work and lets running copies finish within
``shutdown_timeout_s`` (then abandons them safely), exit status 0; a second one exits at once
with status 1. ``--once`` does one pass over every managed partition and exits: 0 when every
task succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from types import FrameType

import structlog

from rlm.config import load_config

log = structlog.get_logger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the tiering daemon (RemoteLogManager)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, help="YAML or TOML configuration file (RLM_* env overrides)")
    p.add_argument("--once", action="store_true", help="one pass over all partitions, then exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlm.daemon.logs import configure_logging
    from rlm.daemon.service import Daemon

    config = load_config(args.config)
    configure_logging(config.log_format, config.log_level)
    daemon = Daemon(config, once=args.once)
    if args.once:
        daemon.start()
        failed = daemon.run_once()
        daemon.stop()
        return 0 if failed == 0 else 1
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop_requested.is_set():
            log.warning("forced_exit", signal=signum)
            os._exit(1)
        log.info("shutdown_requested", signal=signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    daemon.start()
    read_api = None
    if config.read.serve_http:  # the read HTTP API beside the daemon (as `rlm serve`)
        from rlm.commands.serve import read_api_server

        try:
            read_api = read_api_server(config).start()
        except BaseException:
            daemon.stop()
            raise
    while not stop_requested.wait(1.0):
        pass
    if read_api is not None:
        read_api.stop()
    daemon.stop()
    return 0
