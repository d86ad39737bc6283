"""``rlm run --config FILE [--once]``: run the RemoteLogManager daemon beside a broker.

Signals: the first SIGTERM/SIGINT stops taking work and lets running copies finish within
``shutdown_timeout_s`` (then abandons them safely), closes the plugins and exits 0. A second
one forces the stop: running copies are abandoned at once, the plugins get a few seconds to
close, the logs are flushed, and the exit status is 143 (SIGTERM) or 130 (SIGINT). ``--once``
does one pass over every managed partition and exits: 0 when every task succeeded, 1 otherwise.
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

import structlog

from rlm.config import load_config
from rlm.exit_codes import EPILOG, ExitCode

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
    from rlm.daemon.logging_setup import configure_logging
    from rlm.daemon.service import Daemon
    from rlm.daemon.signals import StopRequest, capture_signals

    config = load_config(args.config)
    configure_logging(config.log_format, config.log_level)
    daemon = Daemon(config, once=args.once)
    if args.once:
        try:
            daemon.start()
            failed = daemon.run_once()
        finally:
            daemon.stop()
        return ExitCode.OK if failed == 0 else ExitCode.FAILURE
    stop = StopRequest()
    with capture_signals(stop):
        try:
            daemon.start()
            while not stop.requested.wait(1.0):
                pass
        finally:
            daemon.stop(force=stop.forced)
    code = stop.exit_code
    if code is not ExitCode.OK:
        _leave_after_forced_stop(code)
    return code


def _leave_after_forced_stop(code: int) -> None:
    """The plugins were given their chance to close and the status file is written. Threads that
    would hold the interpreter open at exit (an abandoned copy's pool) are not waited for: flush
    the logs and leave now. With none, return and exit normally."""
    main = threading.main_thread()
    lingering = [t.name for t in threading.enumerate() if t is not main and t.is_alive() and not t.daemon]
    log.warning("forced_stop", exit_status=int(code), lingering_threads=lingering)
    if not lingering:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
