"""``rlm run --config FILE [--once]``: run the RemoteLogManager daemon beside a broker.

Signals: the first SIGTERM/SIGINT stops taking work and lets running copies finish within
``shutdown_timeout_s`` (then abandons them safely), closes the plugins and exits 0. A second
one forces the stop: running copies are abandoned at once, the plugins get a few seconds to
close, the logs are flushed, and the exit status is 143 (SIGTERM) or 130 (SIGINT). ``--once``
does one pass over every managed partition and exits: 0 when every task succeeded, 1 otherwise,
143/130 when a signal cut the pass short (same two steps: drain, then force).
Every pass is logged as ``pass_summary`` (partitions, failures, segments and bytes copied and
deleted, the copy lag left); with ``--once`` and a terminal on stdout it is also printed as one
line for a human.
An invalid configuration or a plugin that cannot be loaded exits 3 (see ``rlm --help``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from rlm.config import DaemonConfig, load_config
from rlm.exit_codes import EPILOG, ExitCode, for_signal

if TYPE_CHECKING:
    from rlm.commands.iceberg_daemon import IcebergFollower
    from rlm.daemon.service import Daemon

log = structlog.get_logger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the tiering daemon (RemoteLogManager)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", type=Path, help="YAML or TOML configuration file (RLM_* env overrides)")
    p.add_argument("--once", action="store_true", help="one pass over all partitions, then exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlm.daemon.service import Daemon
    from rlm.daemon.signals import StopRequest, capture_signals
    from rlm.logging_setup import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_format, config.log_level)
    if config.read.serve_http and not args.once:  # the read HTTP API beside the daemon: as `rlm serve`
        from rlm.commands.serve_plaintext import http_face, refuse_plaintext

        refuse_plaintext(config, [http_face(config)], False)  # before anything is opened
    daemon = Daemon(config, once=args.once)
    stop = StopRequest()
    failed = 0
    clean = True
    read_api = None
    follower = None
    with capture_signals(stop):
        try:
            daemon.start()
            follower = _iceberg_follower(config)
            if args.once:
                failed = daemon.run_once(interrupt=stop.requested)
                if follower is not None and not stop.requested.is_set():
                    failed += len(follower.run_pass().errors)  # the tables follow the copy pass
            else:
                if follower is not None:
                    follower.start()
                if config.read.serve_http:  # the read HTTP API beside the daemon (as `rlm serve`)
                    from rlm.commands.serve import read_api_server

                    read_api = read_api_server(config).start()
                while not stop.requested.wait(1.0):
                    pass
        finally:
            if follower is not None:
                follower.stop()
            if read_api is not None:
                read_api.stop()
            clean = daemon.stop(force=stop.forced)
            if args.once and sys.stdout.isatty():
                print(_once_summary(daemon), flush=True)
    if stop.signum is not None and (args.once or stop.forced.is_set()):
        # forced, or a --once pass cut short: not all the work was done
        code = for_signal(stop.signum)
        _leave(code, "forced_stop" if stop.forced.is_set() else "interrupted")
        return code
    code = ExitCode.FAILURE if failed else ExitCode.OK
    if not clean:
        _leave(code, "copies_abandoned_exit")
    return code


def _once_summary(daemon: Daemon) -> str:
    """``--once``'s line for a terminal: the pass it ran, or as far as it got before a stop."""
    done = daemon.passes.last
    return (done if done is not None else daemon.passes.so_far()).human()


def _iceberg_follower(config: DaemonConfig) -> IcebergFollower | None:
    """``iceberg.daemon``: the follower of the configured topics' tables, or None when off."""
    from rlm.commands.iceberg_daemon import IcebergFollower

    return IcebergFollower(config) if IcebergFollower.enabled(config) else None


def _leave(code: int, event: str) -> None:
    """After a stop that abandoned copies: the plugins were given their chance to close and the
    status file is written. Threads that would hold the interpreter open at exit (an abandoned
    copy's pool) are not waited for: flush the logs and leave now. With none, return."""
    main = threading.main_thread()
    lingering = [t.name for t in threading.enumerate() if t is not main and t.is_alive() and not t.daemon]
    log.warning(event, exit_status=int(code), lingering_threads=lingering)
    if not lingering:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
