"""One ``rlm run`` per work dir and per log dir: exclusive ``flock`` locks held while it runs.

Why: two sidecars on one node by mistake (a second unit file, a container restarted beside a
live one) would both copy every segment (duplicates), race on the status file, the epoch
history and the metadata snapshots in the work dir. The second one must refuse to start.

Two kinds of lock, both ``flock(LOCK_EX | LOCK_NB)``, released by the kernel when the process
dies (even by ``kill -9``), so a crash never leaves a stale lock behind:

* ``<work_dir>/rlm.lock``: a file in the daemon's own directory; it holds the holder's pid so the
  error can name it;
* every log dir: the lock is taken on a file descriptor of the *directory itself*
  (``O_RDONLY | O_DIRECTORY``), which writes nothing into the broker's directory. The broker's
  own ``.lock`` file there is a different inode and a POSIX (``fcntl``) lock, so it is never
  in the way.

Read-only commands (``rlm status``, ``rlm verify``, ``rlm serve``, ``rlm check``) take no lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

import structlog

from rlm.errors import ConfigError, InstanceLockedError

log = structlog.get_logger(__name__)

LOCK_FILE = "rlm.lock"


class InstanceLock:
    """Holds the locks from :meth:`acquire` until :meth:`release` (or the process ends)."""

    def __init__(self, work_dir: Path, log_dirs: list[Path]) -> None:
        self.work_dir = work_dir
        self.log_dirs = log_dirs
        self._fds: list[int] = []

    def acquire(self) -> InstanceLock:
        """Take every lock or none; :class:`InstanceLockedError` names the path already held."""
        path = self.work_dir / LOCK_FILE
        try:
            try:
                self.work_dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                from rlm.environment import describe_os_error

                raise ConfigError(f"work_dir: cannot create the lock file: {describe_os_error(e)}") from e
            self._fds.append(fd)
            self._lock(fd, path, holder=_read_pid(fd))
            _write_pid(fd)
            for d in self.log_dirs:
                try:
                    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    continue  # missing or not a directory: the preflight names it (a config error)
                self._fds.append(dfd)
                self._lock(dfd, d, holder=None)  # held by a sidecar with another work dir
        except BaseException:
            self.release()
            raise
        log.debug(
            "instance_lock_acquired", work_dir=str(self.work_dir), log_dirs=[str(d) for d in self.log_dirs]
        )
        return self

    @staticmethod
    def _lock(fd: int, path: Path, holder: int | None) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f" (pid {holder})" if holder else ""
            raise InstanceLockedError(
                f"{path}: locked by another `rlm run`{who}; only one sidecar may run per work dir "
                "and per log dir (stop the other one, or give this one its own work_dir and log_dirs)"
            ) from e

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in reversed(fds):
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor releases its flock


def _read_pid(fd: int) -> int | None:
    """The pid written in the work dir's lock file by its holder, if any."""
    try:
        raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(raw) if raw.isdigit() else None
    except OSError:
        return None


def _write_pid(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:  # a full work dir: the lock holds anyway, only the pid is missing
        log.warning("instance_lock_pid_not_written", error=str(e))
