"""A read-side configuration per fixture variant: the broker's lines pasted, its raw
``__remote_log_metadata`` records loaded into a file store (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.file import FileRemoteLogMetadataManager
from tests.aiven.helpers import load_metadata, write_config


@pytest.fixture(scope="session")
def aiven_configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``variant → rlm.yaml`` reading the fixture's objects and metadata."""
    out = {}
    for variant in ("a", "b", "c"):
        tmp = tmp_path_factory.mktemp(f"aiven-{variant}")
        store = FileRemoteLogMetadataManager()
        store.configure({"dir": str(tmp / "metadata")})
        try:
            load_metadata(variant, store)
        finally:
            store.close()
        out[variant] = write_config(tmp, variant, tmp / "metadata")
    return out
