"""deploy/docker: the Dockerfile's invariants, read with a real Dockerfile parser (dockerfile-parse):
multi-stage from one base given as a required build argument, a hermetic install (wheelhouse,
--no-index), non-root numeric USER, no secrets, /health healthcheck on the configured port, only
what .dockerignore lets through is copied. The image is built and run in tests/deploy/test_image.py."""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

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


def test_multi_stage_from_one_base_given_as_a_required_argument() -> None:
    bases = base_images()
    assert len(bases) >= 2, "a build stage and a runtime stage"
    assert set(bases) == {"${BASE}"}, "one base, from the BASE build argument"
    global_args = []
    for i in parsed().structure:
        if i["instruction"] == "FROM":
            break
        if i["instruction"] == "ARG":
            global_args.append(i["value"])
    assert global_args == ["BASE"], "BASE has no default: the operator chooses (and pins) the base"


def test_installs_from_the_wheelhouse_only() -> None:
    runs = [i["value"] for i in instructions("RUN") if "pip install" in i["value"]]
    assert runs and all("--no-index" in r for r in runs), "nothing is downloaded during the build"
    copies = [i["value"].split()[0] for i in instructions("COPY") if "--from" not in i["value"]]
    assert "deploy/docker/wheelhouse/deps/" in copies and "deploy/docker/wheelhouse/project/" in copies


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
    assert src == "deploy/docker/rlm.yaml"
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
            generated = src.startswith("deploy/docker/wheelhouse/")  # made by build-image.sh
            assert generated or (ROOT / src).exists(), src
            assert _dockerignore_allows(src.rstrip("/")), f"{src} is excluded by .dockerignore"
    for private in (".venv/bin/python", ".cache/kafka/lib/x.jar", ".git/config", "tests/conftest.py",
                    "rlm/__pycache__/cli.cpython-311.pyc", "benchmarks/bench_tier.py", "rlm/cli.py"):
        assert not _dockerignore_allows(private), private


def test_installs_the_runtime_extras_only() -> None:
    run = " ".join(i["value"] for i in instructions("RUN"))
    m = re.search(r"\"kafka-rlm-sidecar\[([a-z0-9,]+)\]\"", run)
    assert m, "the project is installed with extras"
    extras = set(m.group(1).split(","))
    assert {"s3", "http", "kafka"} <= extras and not extras & {"dev", "spark", "all"}
