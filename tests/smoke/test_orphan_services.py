"""A SIGKILLed test run (CI timeout, OOM killer) must not leave its service processes running:
``atexit`` never runs then, so the children are tied to the test process with PDEATHSIG."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.services.proc import REPO_ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux-only")

# A stand-in for a pytest process: starts one real service, reports it, then hangs until killed.
_PARENT = """
import json, sys, time
from tests.services.s3 import SeaweedFS
s = SeaweedFS(name="orphan-check").start()
sockets = [str(p) for p in s.grpc_socket_paths()]
print(json.dumps({"pid": s.proc.pid, "base": str(s.base), "sockets": sockets}), flush=True)
time.sleep(3600)
"""


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped by init) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_service_dies_with_a_sigkilled_test_process() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    info: dict[str, Any] = {}
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line, f"the parent exited with {parent.wait()} before starting SeaweedFS"
        info = json.loads(line)
        child = int(info["pid"])
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        for _ in range(200):  # the kernel delivers SIGKILL at once; allow the child time to exit
            if not _alive(child):
                break
            time.sleep(0.05)
        assert not _alive(child), f"weed (pid {child}) survived the SIGKILL of its test process"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if "pid" in info:  # clean up whatever is left, whether or not the assertion held
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(info["pid"]), signal.SIGKILL)
            for sock in info.get("sockets", []):
                Path(sock).unlink(missing_ok=True)
            shutil.rmtree(str(info["base"]), ignore_errors=True)
