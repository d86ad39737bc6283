"""deploy/docker: the Dockerfile's invariants, read with a real Dockerfile parser (dockerfile-parse):
multi-stage from one pinned base, non-root numeric USER, no secrets, /health healthcheck on the
configured port, only what .dockerignore lets through is copied. Built only where a runtime exists."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from rlm.config import load_config
from tests.deploy.conftest import DEPLOY, ROOT

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
SECRETISH = re.compile(r"(PASSWORD|SECRET|TOKEN|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


def parsed() -> DockerfileParser:
    p = DockerfileParser(path=str(DOCKERFILE.parent), cache_content=True)
    return p


def instructions(kind: str) -> list[dict[str, Any]]:
    return [i for i in parsed().structure if i["instruction"] == kind]


def last_stage() -> list[dict[str, Any]]:
    structure = parsed().structure
    start = max(n for n, i in enumerate(structure) if i["instruction"] == "FROM")
    return structure[start:]


def base_images() -> list[str]:
    args: dict[str, str] = {}
    for i in parsed().structure:  # global ARGs: those before the first FROM
        if i["instruction"] == "FROM":
            break
        if i["instruction"] == "ARG" and "=" in i["value"]:
            k, _, v = i["value"].partition("=")
            args[k.strip()] = v.strip()
    out = []
    for i in instructions("FROM"):
        image = i["value"].split()[0]
        out.append(re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image))
    return out


def test_multi_stage_from_one_pinned_base() -> None:
    bases = base_images()
    assert len(bases) >= 2, "a build stage and a runtime stage"
    assert len(set(bases)) == 1, bases
    image = bases[0]
    name, _, tag = image.partition("@")[0].rpartition(":")
    assert name and tag and tag != "latest", image
    assert re.fullmatch(r"\d+\.\d+\.\d+-slim-\w+", tag), f"pin an exact release of a slim image: {image}"


def test_runs_as_non_root() -> None:
    users = [i["value"] for i in last_stage() if i["instruction"] == "USER"]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, "numeric non-root uid (Kubernetes runAsNonRoot checks it)"


def test_no_secrets_in_image() -> None:
    for i in parsed().structure:
        if i["instruction"] in {"ENV", "ARG", "LABEL"}:
            assert not SECRETISH.search(i["value"]), i["content"]
    copied = " ".join(i["value"] for i in instructions("COPY") + instructions("ADD"))
    assert ".env" not in copied and "credentials" not in copied
    assert not instructions("ADD"), "COPY only (ADD fetches URLs and unpacks archives)"


def test_entrypoint_healthcheck_and_port_match_the_default_config() -> None:
    entry = json.loads(instructions("ENTRYPOINT")[-1]["value"])
    cmd = json.loads(instructions("CMD")[-1]["value"])
    assert entry == ["rlm"]
    assert cmd[:1] == ["run"] and "--config" in cmd
    config_path = cmd[cmd.index("--config") + 1]
    copies = [i["value"].split() for i in last_stage() if i["instruction"] == "COPY"]
    src = next(c[-2] for c in copies if c[-1] == config_path)
    cfg = load_config(ROOT / src)
    assert cfg.http.enabled and cfg.http.host == "0.0.0.0"
    exposed = {int(p.split("/")[0]) for i in instructions("EXPOSE") for p in i["value"].split()}
    assert cfg.http.port in exposed
    health = instructions("HEALTHCHECK")[-1]["value"]
    assert "/health" in health and f"'{cfg.http.port}'" in health
    assert str(cfg.work_dir) in " ".join(i["value"] for i in instructions("VOLUME"))
    assert cfg.log_dirs and all(str(d).startswith("/var/lib/kafka/") for d in cfg.log_dirs)


def _dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes; a dir pattern covers its files."""
    allowed = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        neg = pat.startswith("!")
        pat = pat.lstrip("!").replace("**/", "")
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes) or fnmatch.fnmatchcase(parts[-1], pat):
            allowed = neg
    return allowed


def test_dockerignore_lets_through_exactly_what_is_copied() -> None:
    for i in instructions("COPY"):
        words = i["value"].split()
        if any(w.startswith("--from") for w in words):
            continue
        for src in words[:-1]:
            assert (ROOT / src).exists(), src
            assert _dockerignore_allows(src), f"{src} is excluded by .dockerignore"
    for private in (".venv/bin/python", ".cache/kafka/lib/x.jar", ".git/config", "tests/conftest.py",
                    "rlm/__pycache__/cli.cpython-311.pyc", "benchmarks/bench_tier.py"):
        assert not _dockerignore_allows(private), private


def test_installs_the_runtime_extras_only() -> None:
    run = " ".join(i["value"] for i in instructions("RUN"))
    m = re.search(r"\"\.\[([a-z0-9,]+)\]\"", run)
    assert m, "the project is installed with extras"
    extras = set(m.group(1).split(","))
    assert {"s3", "http"} <= extras and not extras & {"dev", "spark", "all"}


@pytest.mark.slow
def test_build_stage_context_builds_the_package(tmp_path: Path) -> None:
    """What the build stage COPYs (and .dockerignore lets through) is enough to build the wheel with
    the ``rlm`` entry point: the part of the image build that needs no container runtime."""
    ctx = tmp_path / "ctx"
    first_from = True
    for i in parsed().structure:
        if i["instruction"] == "FROM":
            if not first_from:
                break
            first_from = False
        if i["instruction"] == "COPY":
            *srcs, dest = i["value"].split()
            for src in srcs:
                into_dir = dest.endswith("/") or len(srcs) > 1  # Docker's rule for the destination
                target = ctx / dest / Path(src).name if into_dir else ctx / dest
                if (ROOT / src).is_dir():
                    shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / src, target)
    uv = Path(sys.executable).with_name("uv")
    out = tmp_path / "dist"
    cmd = (
        [str(uv), "build", "--wheel", "--out-dir", str(out), str(ctx)]
        if uv.exists()
        else [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ctx)]
    )
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        assert "rlm = rlm.cli:main" in z.read(entry).decode()
    for pkg in ("rlm/cli.py", "rsm_plugins/__init__.py", "rlmm/__init__.py", "fetcher/__init__.py"):
        assert pkg in names


def _docker_runtime() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
def test_image_builds_and_runs_as_non_root() -> None:
    if not _docker_runtime():
        pytest.skip("no container runtime on this machine (docker info fails): image build not tried")
    tag = "kafka-rlm-sidecar:test"
    subprocess.run(["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)], check=True, timeout=1800)
    out = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "id", tag, "-u"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "10001"
    res = subprocess.run(["docker", "run", "--rm", tag, "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "run" in res.stdout
