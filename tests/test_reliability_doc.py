"""docs/reliability.md's generated section: up to date with the checked-in tests and data, and the
generator itself, run on a temporary directory of fake fault and fuzz test modules (so it is tested
without depending on what tests/faults/ holds at any moment)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_reliability_doc.py"


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reliability_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reliability_doc", module)  # its dataclass needs its module registered
    spec.loader.exec_module(module)
    return module


def test_reliability_doc_is_up_to_date() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, (
        "docs/reliability.md is out of date: run .venv/bin/python scripts/gen_reliability_doc.py\n"
        + res.stderr
    )


FAULTS = '''
"""Fake fault tests."""
import pytest

pytestmark = pytest.mark.faults


def test_blackhole():
    """Storage blackholed for 5 s during a copy | the copy resumes; verify passes.

    More detail that is not in the table."""


@pytest.mark.parametrize("step", ["copy", "delete"])
def test_kill(step):
    """kill -9 at each step: nothing lost."""


def test_undocumented():
    pass


class TestClock:
    def test_jump(self):
        """A clock jump of +1 h: no premature expiry."""
'''

UNMARKED = '''
def test_helper_check():
    """Not a fault test."""
'''

FUZZ = '''
"""Fake parser fuzzing: random bytes only ever raise the typed error."""
import pytest
from hypothesis import given, settings, strategies as st

FUZZ = settings(max_examples=5, deadline=None)


@settings(max_examples=7)
@given(st.binary())
def test_outer(data):
    pass


@pytest.mark.parametrize("kind", ["a", "b"])
def test_nested(kind):
    @FUZZ
    @given(st.integers())
    def run(x):
        pass

    run()


def test_not_fuzz():
    pass
'''

def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _run_results(commit: str) -> dict[str, object]:
    """What tests/faults/conftest.py writes: one failed and one skipped case among the fakes."""
    return {"commit": commit, "product_dirty": False, "date": "2026-11-24T05:00:00+00:00", "results": {
        "test_fake_faults.py::test_blackhole": {"outcome": "passed", "time_s": 12.3},
        "test_fake_faults.py::test_kill[copy]": {"outcome": "failed", "time_s": 3.0},
        "test_fake_faults.py::test_kill[delete]": {"outcome": "skipped", "time_s": 0.0},
        "test_fake_faults.py::TestClock::test_jump": {"outcome": "passed", "time_s": 0.5}}}


@pytest.mark.slow  # a pytest subprocess collects the fake modules
def test_generator_on_fake_modules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gen = _gen()
    faults, fuzz, data = tmp_path / "faults", tmp_path / "fuzz", tmp_path / "data"
    faults.mkdir()
    fuzz.mkdir()
    (faults / "test_fake_faults.py").write_text(textwrap.dedent(FAULTS))
    (faults / "test_unmarked.py").write_text(textwrap.dedent(UNMARKED))
    (fuzz / "test_fake_fuzz.py").write_text(textwrap.dedent(FUZZ))
    run = tmp_path / "run.json"
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\nIntro.\n\n## Known edges\n\nHand-written text.\n")
    args = [
        "--doc",
        str(doc),
        "--faults-dir",
        str(faults),
        "--data-dir",
        str(data),
        "--tests-root",
        str(fuzz),
        "--run-results",
        str(run),
    ]

    # results of a commit older than the last product change are refused
    run.write_text(json.dumps(_run_results(_git("rev-list", "--max-parents=0", "HEAD").splitlines()[0])))
    assert gen.main(args) == 1
    assert "refusing to record fault results" in capsys.readouterr().err
    assert not (data / gen.RESULTS_FILE).exists()
    head = _git("rev-parse", "HEAD")
    run.write_text(json.dumps(_run_results(head)))
    assert gen.main(args) == 0
    text = doc.read_text()
    assert text.startswith("# Reliability\n\nIntro.\n\n## Figures\n\n" + gen.BEGIN)
    assert text.endswith(gen.END + "\n\n## Known edges\n\nHand-written text.\n")
    rows = [line for line in text.splitlines() if line.startswith("| `test_")]
    assert rows == [
        "| `test_fake_faults.py::TestClock::test_jump` | A clock jump of +1 h: no premature expiry. "
        "| survived (passed), 0.5 s |",
        "| `test_fake_faults.py::test_blackhole` | Storage blackholed for 5 s during a copy \\| the copy "
        "resumes; verify passes. | survived (passed), 12.3 s |",
        "| `test_fake_faults.py::test_kill[copy]` | kill -9 at each step: nothing lost. "
        "| **FAILED** (failed), 3.0 s |",
        "| `test_fake_faults.py::test_kill[delete]` | kill -9 at each step: nothing lost. "
        "| not run (skipped) |",
        "| `test_fake_faults.py::test_undocumented` | **no docstring** | not run |",
    ]
    assert "5 tests in `tests/faults/`" in text
    assert (f"commit `{head[:10]}`, 2026-11-24T05:00:00+00:00: 2 of 5 passed (survived), 1 failed, "
            "1 not run, 1 skipped.") in text
    warnings = capsys.readouterr().err
    assert "test_unmarked.py::test_helper_check: in faults/ but not marked `faults`" in warnings
    assert "test_fake_faults.py::test_undocumented: no docstring" in warnings
    recorded = json.loads((data / gen.RESULTS_FILE).read_text())
    assert recorded == _run_results(head)  # the run's file, whole
    # --check: the doc against the recorded results; a failure in this session's run fails it
    assert gen.main([*args, "--check"]) == 1
    assert "did not all pass" in capsys.readouterr().err
    run.unlink()
    assert gen.main([*args, "--check"]) == 0

    fuzz_row = next(line for line in text.splitlines() if "test_fake_fuzz.py" in line)
    # 7 (outer @settings) + 2 parametrized cases x 5 (the module's settings on the nested @given)
    assert fuzz_row.startswith("| Fake parser fuzzing: random bytes only ever raise the typed error |")
    assert fuzz_row.endswith("| 3 | 17 | - |")
    assert "not measured yet (`benchmarks/bench_load.py" in text

    # A hand edit inside the markers is caught by --check and undone by a rerun (which splices
    # the freshly rendered section in); the text around the markers is kept.
    doc.write_text(text.replace("(passed), 12.3 s", "(passed), 1.0 s"))
    assert gen.main([*args, "--check"]) == 1
    section = gen.BEGIN + text.split(gen.BEGIN)[1].split(gen.END)[0] + gen.END
    assert gen.splice(doc.read_text(), section) == text
