"""Process helpers shared by the service launchers: free ports, waiting, and clean stops.

Every service a test starts runs in its own process group so that stopping it (or the
interpreter exiting) leaves no stray JVM or server behind. ``atexit`` does not run when the test
process is SIGKILLed (a CI timeout, an OOM kill), so on Linux each child also asks the kernel for
``PR_SET_PDEATHSIG``: it gets SIGKILL the moment the process that spawned it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("RLM_CACHE_DIR", REPO_ROOT / ".cache"))
RUN_DIR = Path(os.environ.get("RLM_IT_DIR", REPO_ROOT / ".it"))

_LIVE: set[subprocess.Popen[bytes]] = set()


class ServiceError(RuntimeError):
    """A test service could not be started or did not become ready."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int, *, spacing_ok: Callable[[int], bool] | None = None) -> list[int]:
    """Return ``n`` distinct free ports; ``spacing_ok`` can demand extra ports be free too."""
    out: list[int] = []
    while len(out) < n:
        p = free_port()
        if p in out or (spacing_ok is not None and not spacing_ok(p)):
            continue
        out.append(p)
    return out


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def java() -> str:
    """The java executable: $JAVA_HOME/bin/java if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ServiceError("java not found: install a JDK (17+) or set JAVA_HOME")
    return found


def ensure_jars(name: str) -> Path:
    """Resolve the jars of ``deploy/local/<name>/pom.xml`` (cached) and return the lib folder."""
    script = REPO_ROOT / "deploy" / "local" / "fetch-jars.sh"
    subprocess.run(["bash", str(script), name], check=True)
    return CACHE_DIR / name / "lib"


_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` tying the child's life to this process (Linux only, else ``None``).

    Prepared before the fork (library loaded, function resolved) so the child only makes two
    system calls. The signal survives ``execve``; it is tied to the spawning *thread*, so services
    must be spawned from the main thread (they are: session fixtures). If this process already
    died between fork and ``prctl``, the child exits at once.
    """
    if os.uname().sysname != "Linux":
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(
    cmd: Sequence[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a new process group, output to ``log``; it is killed at interpreter exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")  # noqa: SIM115 - handed to the child, closed with it
    proc = subprocess.Popen(
        list(cmd),
        stdout=fh,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_pdeathsig_preexec(),  # two syscalls in the child, no locks taken
    )
    fh.close()
    _LIVE.add(proc)
    return proc


def stop(proc: subprocess.Popen[bytes] | None, *, grace: float = 30.0) -> None:
    """SIGTERM the process group, then SIGKILL after ``grace`` seconds."""
    if proc is None:
        return
    _LIVE.discard(proc)
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole process group at once (crash simulation, or a hung stop)."""
    _LIVE.discard(proc)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()  # a process that is no group leader (no session of its own): killpg missed it
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def wait_until(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    interval: float = 0.25,
) -> None:
    """Poll ``check`` until true; fail early if ``proc`` died, quoting the end of ``log``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceError(f"{what}: process exited with {proc.returncode}{_tail(log)}")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(interval)
    raise ServiceError(f"{what}: not ready after {timeout:.0f}s{_tail(log)}")


def _tail(log: Path | None, n: int = 40) -> str:
    if log is None or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()[-n:]
    return "\n--- " + str(log) + " ---\n" + "\n".join(lines)


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        kill(proc)
