"""Test configuration: real services are started by the fixture modules below, once per session.

Isolation: ``RLM_*`` variables exported by whoever runs the tests would silently change every
configuration the tests build (they rank above the file), so they are removed for the whole
session. Only the harness's own knobs, which configure the test run and not the daemon, stay.

Disk: a session on a disk with less than ``MIN_FREE_DISK_BYTES`` free stops before its first
test with one line saying so. Below it SeaweedFS registers no volume (every S3 test then errors
with "not ready after 60s") and podman cannot commit the image's layers: a CI run once failed
that way with 99 unrelated-looking errors.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.s3",
    "tests.fixtures.hdfs",
    "tests.fixtures.spark",
    "tests.fixtures.iceberg_rest",
]

#: free bytes the suite needs where it writes (services' data under .it, pytest's tmp, images)
MIN_FREE_DISK_BYTES = 3 * 1024**3


def free_disk_problem(path: Path, need: int = MIN_FREE_DISK_BYTES) -> str | None:
    """Why the suite cannot run on ``path``'s file system, or None."""
    free = shutil.disk_usage(path).free
    if free >= need:
        return None
    return (f"only {free / 1024**3:.1f} GiB free on the file system of {path} (the suite needs "
            f"{need / 1024**3:.0f} GiB: SeaweedFS registers no volume and podman cannot build below "
            f"that); free some space and run again")


def pytest_sessionstart(session: pytest.Session) -> None:
    problem = free_disk_problem(Path(str(session.config.rootpath)))
    if problem is not None:
        pytest.exit(problem, returncode=3)


#: Harness variables (jar and service caches, fuzz budget, JIT switch): they change how tests run,
#: not what the daemon is configured with.
HARNESS_VARIABLES = frozenset(
    {"RLM_CACHE_DIR", "RLM_IT_DIR", "RLM_M2_REPO", "RLM_FUZZ_EXAMPLES", "RLM_DISABLE_JIT"}
)


def caller_rlm_variables() -> list[str]:
    return sorted(
        k for k in os.environ if k.upper().startswith("RLM_") and k.upper() not in HARNESS_VARIABLES
    )


@pytest.fixture(scope="session", autouse=True)
def _no_caller_rlm_environment() -> Iterator[None]:
    """Remove the caller's ``RLM_*`` variables for the session (and the subprocesses it starts)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in caller_rlm_variables():
            mp.delenv(name)
        yield


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """A command run in-process (``cli_main([...])``) configures structlog for itself (stderr,
    warning level); restore the configuration so later tests still see their log events."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
