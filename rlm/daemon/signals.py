"""Signals of ``rlm run``: handlers that live only as long as the daemon, and a two-step stop.

:func:`capture_signals` installs handlers for a ``with`` block and restores whatever was there
before (uvicorn's ``capture_signals``), so embedding the daemon (tests, ``rlm demo``) leaves the
process as it found it. :class:`StopRequest` counts signals: the first asks for a graceful stop
(drain within ``shutdown_timeout_s``), the second for a forced one (stop waiting for running
copies, close the plugins within :data:`FORCED_CLOSE_S`, flush the logs, exit 128 + signal).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import structlog

from rlm.exit_codes import ExitCode, for_signal

log = structlog.get_logger(__name__)

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCED_CLOSE_S = 5.0
"""How long a forced stop waits for the plugins to close."""

Handler = Callable[[int, FrameType | None], Any]


@contextmanager
def capture_signals(handler: Handler, signals: tuple[int, ...] = HANDLED_SIGNALS) -> Iterator[None]:
    """Route ``signals`` to ``handler`` inside the block; the previous handlers come back after it.

    Outside the main thread (where Python cannot install handlers) the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class StopRequest:
    """First signal: :attr:`requested`; second: :attr:`forced`. Safe to use as a signal handler."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.forced = threading.Event()
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None = None) -> None:
        if self.requested.is_set():
            self.signum = signum
            self.forced.set()
            log.warning("forced_stop_requested", signal=signal.Signals(signum).name)
            return
        self.signum = signum
        self.requested.set()
        log.info("shutdown_requested", signal=signal.Signals(signum).name)

    @property
    def exit_code(self) -> ExitCode:
        """OK after a graceful stop; 128 + the second signal after a forced one."""
        if self.forced.is_set() and self.signum is not None:
            return for_signal(self.signum)
        return ExitCode.OK
