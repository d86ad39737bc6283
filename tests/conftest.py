"""Test configuration: real services are started by the fixture modules below, once per session.

Isolation: ``RLM_*`` variables exported by whoever runs the tests would silently change every
configuration the tests build (they rank above the file), so they are removed for the whole
session. Only the harness's own knobs, which configure the test run and not the daemon, stay.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import structlog

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.s3",
    "tests.fixtures.hdfs",
    "tests.fixtures.spark",
    "tests.fixtures.iceberg_rest",
]

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
