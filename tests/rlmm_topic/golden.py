"""Runs Apache Kafka's own classes through the test-only Java harness ``java/RlmmGolden.java``.

The harness is compiled with ``javac`` against the broker's jars at test time (never checked in
as bytecode), so the golden values always come from the Kafka release the tests run against.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.services.proc import ensure_jars, java

SOURCE = Path(__file__).parent / "java" / "RlmmGolden.java"


def javac() -> str:
    found = shutil.which("javac")
    if found is None:
        java_bin = Path(java()).resolve().parent
        cand = java_bin / "javac"
        if not cand.exists():
            raise RuntimeError("javac not found: the golden tests need a JDK (17+)")
        found = str(cand)
    return found


@dataclass(frozen=True)
class KafkaGolden:
    """A compiled harness: ``run(mode, lines)`` returns one output line per input line."""

    classes: Path
    lib: Path

    @classmethod
    def compile(cls, out_dir: Path) -> KafkaGolden:
        lib = ensure_jars("kafka")
        out_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([javac(), "-nowarn", "-cp", str(lib / "*"), "-d", str(out_dir), str(SOURCE)],
                       check=True, capture_output=True, text=True, timeout=300)
        return cls(out_dir, lib)

    def run(self, mode: str, lines: list[str], *args: str) -> list[str]:
        cmd = [java(), "-Xmx256m", "-cp", f"{self.classes}:{self.lib / '*'}", "RlmmGolden", mode, *args]
        res = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise AssertionError(f"RlmmGolden {mode} failed ({res.returncode}):\n{res.stderr[-4000:]}")
        out = [ln for ln in res.stdout.splitlines() if ln.strip()]
        assert len(out) == len(lines), f"expected {len(lines)} lines from RlmmGolden, got {len(out)}"
        return out
