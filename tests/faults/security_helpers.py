"""Helpers of the security tests: run the ``rlm`` command, see which addresses a process listens
on, bind-mount a directory read-only."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the caller's ``RLM_*`` settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    return {**env, **extra}


def rlm(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``rlm ARGS`` in a subprocess, as an operator runs it; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "rlm.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
    )


def spawn_rlm(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A long-running ``rlm ARGS`` (daemon, server) writing stdout+stderr to ``log``."""
    out = log.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "rlm.cli", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env or clean_env(),
        )
    finally:
        out.close()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a grace period; never leaves the child behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _hex_address(text: str) -> str:
    """``/proc/net/tcp`` local address (``0100007F:1F90``) -> ``127.0.0.1`` (or an IPv6 text)."""
    addr = bytes.fromhex(text.split(":")[0])
    if len(addr) == 4:
        return socket.inet_ntop(socket.AF_INET, addr[::-1])
    words = b"".join(addr[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on (from /proc)."""
    inodes: set[str] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    out = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                out.append((_hex_address(cols[1]), int(cols[1].split(":")[1], 16)))
    return sorted(out)


def wait_listening(
    proc: subprocess.Popen[bytes], count: int, log: Path, timeout: float = 90
) -> list[tuple[str, int]]:
    """The process's listening sockets once there are ``count`` of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"process exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        got = listening(proc.pid)
        if len(got) >= count:
            return got
        time.sleep(0.2)
    raise AssertionError(
        f"no {count} listening sockets: {listening(proc.pid)}\n{log.read_text(errors='replace')[-3000:]}"
    )


@contextlib.contextmanager
def read_only_bind_mount(src: Path, dst: Path) -> Iterator[Path | str]:
    """``dst`` = ``src`` mounted read-only; yields the mount point, or the reason it was refused."""
    dst.mkdir(parents=True, exist_ok=True)
    bind = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True)
    if bind.returncode != 0:
        yield f"mount --bind refused: {bind.stderr.strip() or bind.returncode}"
        return
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], capture_output=True, text=True)
        if ro.returncode != 0:
            yield f"remount read-only refused: {ro.stderr.strip() or ro.returncode}"
            return
        yield dst
    finally:
        if subprocess.run(["umount", str(dst)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "--lazy", str(dst)], capture_output=True, check=False)  # still busy

