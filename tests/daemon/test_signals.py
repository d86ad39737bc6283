"""capture_signals restores the previous handlers; StopRequest's two steps and exit statuses."""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest

from rlm.cli import build_parser
from rlm.daemon.signals import StopRequest, capture_signals
from rlm.exit_codes import ExitCode


def test_handlers_restored_even_when_the_block_fails() -> None:
    seen: list[int] = []

    def before(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    old_term = signal.signal(signal.SIGTERM, before)
    try:
        old_int = signal.getsignal(signal.SIGINT)
        stop = StopRequest()
        with pytest.raises(RuntimeError), capture_signals(stop):
            assert signal.getsignal(signal.SIGTERM) is stop
            raise RuntimeError("start-up failed")
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGINT) is old_int
        os.kill(os.getpid(), signal.SIGTERM)  # reaches the restored handler, not the daemon's
        assert seen == [signal.SIGTERM] and not stop.requested.is_set()
    finally:
        signal.signal(signal.SIGTERM, old_term)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_first_signal_drains_second_forces(sig: signal.Signals, code: int) -> None:
    stop = StopRequest()
    with capture_signals(stop):
        os.kill(os.getpid(), sig)
        assert stop.requested.is_set() and not stop.forced.is_set()
        assert stop.exit_code == ExitCode.OK
        os.kill(os.getpid(), sig)
        assert stop.forced.is_set()
    assert stop.exit_code == code


def test_exit_statuses_documented_in_help() -> None:
    text = build_parser().format_help()
    for code in ExitCode:
        assert f"\n  {int(code):<4} " in text, code
    docs = (__import__("pathlib").Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} |" in docs, code
