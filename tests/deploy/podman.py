"""A container runtime for the image tests: Debian's podman with runc, set up as on a fresh host.

podman, runc and mmdebstrap (which makes the base image from Debian packages) are installed with
apt-get like the other Debian tools of the suite. A ``containers.conf`` of the test's own selects
``runc`` (crun fails on hosts with hybrid cgroups) and ``default_ulimits = []`` (podman otherwise sets
an nofile limit that some hosts refuse with setrlimit); it is passed with ``CONTAINERS_CONF``.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.conftest import apt_install_tool

CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
"""


class RuntimeUnavailable(RuntimeError):
    """podman (or one of its tools) is missing and cannot be installed, or cannot run a container."""


@dataclass(frozen=True)
class Podman:
    """``podman`` with the test's containers.conf; ``run`` returns the completed process."""

    exe: str
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.exe, *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {r.returncode}: {r.stderr[-3000:]}")
        return r


def install_podman(conf_dir: Path) -> Podman:
    """podman, runc and mmdebstrap present (installed when missing and possible) and configured."""
    tools = {tool: apt_install_tool(tool, tool) for tool in ("podman", "runc", "mmdebstrap")}
    missing = [t for t, path in tools.items() if path is None]
    if missing:
        raise RuntimeUnavailable(f"{', '.join(missing)} missing and not installable (needs root and apt-get)")
    conf = conf_dir / "containers.conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf.write_text(CONTAINERS_CONF)
    exe = tools["podman"]
    assert exe is not None
    return Podman(exe, conf)
