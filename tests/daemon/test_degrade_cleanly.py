"""Every command degrades cleanly (issue 39, item 3): with a work dir that is a file, lies under a
file, is missing, is read-only or is on a full disk, each subcommand either works (reads keep their
index cache in memory) or ends with one ``rlm: error:`` line naming the path: never a traceback.

Before: ``rlm fetch``, ``offsets`` and ``iceberg`` printed ``OSError: [Errno 30] ...
remote-log-index-cache`` with a read-only work dir. The read-only and full-disk cases mount a
read-only bind mount / a 256 KiB tmpfs (root only; skipped where mounting is refused); the
others need nothing. ``rlm backfill`` is left out (a Spark session per case; its work dir use is
the same fetcher as ``rlm fetch``'s), ``replay`` needs a broker and only checks its error line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.faults.security_helpers import read_only_bind_mount

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("degrade") / "demo"
    argv = [sys.executable, "-m", "rlm.cli", "demo", "--dir", str(d), "--size-mb", "1", "--no-spark"]
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return d


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}


@contextlib.contextmanager
def broken_work_dir(kind: str, demo: Path, tmp: Path) -> Iterator[Path]:
    """A work dir of the given kind (the metadata store stays the demo's, outside it)."""
    if kind == "file":
        (tmp / "work").write_text("a file where the work dir belongs")
        yield tmp / "work"
    elif kind == "under-a-file":
        (tmp / "f").write_text("a file")
        yield tmp / "f" / "work"
    elif kind == "missing":
        yield tmp / "new" / "work"
    elif kind == "read-only":
        src = tmp / "src"
        shutil.copytree(demo / "rlm-work", src, ignore=shutil.ignore_patterns("metadata", "rlm.lock"))
        with read_only_bind_mount(src, tmp / "ro") as mounted:
            if isinstance(mounted, str):
                pytest.skip(mounted)
            yield mounted
    elif kind == "full":
        mnt = tmp / "full"
        mnt.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
        try:
            shutil.copy2(demo / "rlm-work" / "status.json", mnt / "status.json")
            with contextlib.suppress(OSError), open(mnt / "filler", "wb") as f:  # ENOSPC ends it
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
            yield mnt
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
    else:
        raise AssertionError(kind)


KINDS = ["file", "under-a-file", "missing", "read-only", "full"]
# command -> arguments after --config (None: the command takes no --config)
COMMANDS: dict[str, list[str]] = {
    "status": ["status"],
    "fetch": ["fetch", "--topic", "orders", "--offset", "0", "--count", "1"],
    "offsets": ["offsets", "--topic", "orders", "--timestamp", "1d-ago"],
    "verify": ["verify"],
    "iceberg": ["iceberg", "--topic", "orders"],
    "check": ["check"],
    "run": ["run", "--once"],
    "restore": ["restore", "--topic", "orders", "--log-dir", "{tmp}/restore-target"],
    "replay": ["replay", "--group", "g", "--topic", "orders", "--to-datetime", "1d-ago"],
}
READS = {"fetch", "offsets", "verify"}  # must work: their cache is optional


def config_for(demo: Path, work: Path, tmp: Path) -> Path:
    doc = yaml.safe_load((demo / "rlm.yaml").read_text())
    doc["work_dir"] = str(work)
    doc["metadata"]["config"]["dir"] = str(demo / "rlm-work" / "metadata")
    doc["log_format"] = "json"
    cfg = tmp / "rlm.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return cfg


def assert_clean(res: subprocess.CompletedProcess[str], what: str) -> None:
    assert "Traceback" not in res.stderr, f"{what}:\n{res.stderr[-3000:]}"
    if res.returncode not in (0, 1, 3):
        raise AssertionError(f"{what}: exit {res.returncode}\n{res.stderr[-2000:]}")
    if res.returncode != 0 and not (what.endswith("rlm check") and "\nFAIL  work dir" in res.stdout):
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.stdout
        assert last.startswith("rlm: error:"), f"{what}: {last}"


@pytest.mark.parametrize("kind", KINDS)
def test_every_subcommand_with_a_broken_work_dir(kind: str, demo: Path, tmp_path: Path) -> None:
    with broken_work_dir(kind, demo, tmp_path) as work:
        cfg = config_for(demo, work, tmp_path)
        for name, args in COMMANDS.items():
            if name == "iceberg" and kind == "missing":
                continue  # creates the work dir and a table: works, and is slow
            argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
            cmd = [sys.executable, "-m", "rlm.cli", *argv[:1], "--config", str(cfg), *argv[1:]]
            res = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=180)
            what = f"{kind}: rlm {' '.join(argv)}"
            assert_clean(res, what)
            if name in READS:
                assert res.returncode == 0, f"{what} must work without its cache:\n{res.stderr[-2000:]}"
            if kind != "missing" and res.returncode != 0 and name in ("status", "run", "check", "iceberg"):
                said = res.stderr + res.stdout
                assert str(work) in said or str(work.parent) in said, f"{what}: names no path: {said}"
        serve(cfg, tmp_path, kind)


def serve(cfg: Path, tmp: Path, kind: str) -> None:
    """``rlm serve`` starts and listens (reads need no writable work dir), or says why in one line."""
    argv = [sys.executable, "-m", "rlm.cli", "serve", "--config", str(cfg), "--port", "0"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.startswith("http API listening on"):
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_clean(subprocess.CompletedProcess(proc.args, proc.returncode, line, err), f"{kind}: rlm serve")


def test_read_only_work_dir_was_a_traceback_for_the_index_cache(demo: Path, tmp_path: Path) -> None:
    """The issue's report, exactly: a read-only work dir and ``rlm fetch`` (now: works, warns once)."""
    with broken_work_dir("read-only", demo, tmp_path) as work:
        cfg = config_for(demo, work, tmp_path)
        argv = [sys.executable, "-m", "rlm.cli", "fetch", "--config", str(cfg), "--topic", "orders",
                "--offset", "0", "--count", "1"]
        res = subprocess.run(argv, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.count("\n") == 1, res.stderr[-2000:]
    assert "index_cache_off_disk" in res.stderr and "remote-log-index-cache" in res.stderr
