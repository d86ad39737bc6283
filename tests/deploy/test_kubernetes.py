"""deploy/kubernetes: every manifest validates offline against the Kubernetes API schemas
(kubernetes-validate ships them), and the sidecar's invariants hold in code: the broker's log volume is
mounted read-only, probes hit endpoints a live daemon answers, non-root, resources set, ports and
grace periods consistent with the mounted configuration."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from rlm.config import DaemonConfig, load_config
from tests.deploy.conftest import DEPLOY, LiveDaemon, load_yaml_docs

K8S = DEPLOY / "kubernetes"
K8S_VERSION = "1.30"
# Custom resources: kubernetes-validate has no schema for them; checked structurally below.
CUSTOM_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule", "ClusterPolicy", "Kustomization"}
SIDECAR_IMAGE = "kafka-rlm-sidecar:"
DEFAULT_GRACE_S = 30


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(f, d) for f in sorted(K8S.rglob("*.yaml")) for d in load_yaml_docs(f)]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in manifests() if d.get("kind") == kind]


def config_maps(directory: Path) -> dict[str, dict[str, Any]]:
    """ConfigMaps by name among the manifests of one directory (each example is applied on its own)."""
    docs = [d for f, d in manifests() if f.parent == directory and d.get("kind") == "ConfigMap"]
    return {d["metadata"]["name"]: d for d in docs}


def strimzi_pod() -> dict[str, Any]:
    """A broker pod as Strimzi 0.4x creates it (JBOD volume 0 -> volume data-0), before injection."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "my-cluster-broker-0",
            "labels": {"strimzi.io/cluster": "my-cluster", "strimzi.io/broker-role": "true",
                       "strimzi.io/kind": "Kafka"},
        },
        "spec": {
            "containers": [{
                "name": "kafka",
                "image": "quay.io/strimzi/kafka:0.48.0-kafka-4.1.0",
                "volumeMounts": [{"name": "data-0", "mountPath": "/var/lib/kafka/data-0"}],
            }],
            "volumes": [{"name": "data-0",
                         "persistentVolumeClaim": {"claimName": "data-0-my-cluster-broker-0"}}],
        },
    }


def injected_strimzi_pod() -> dict[str, Any]:
    patch = json.loads((K8S / "strimzi" / "sidecar-patch.json").read_text())
    text = json.dumps(patch).replace("POD_NAME", "my-cluster-broker-0")
    result: dict[str, Any] = jsonpatch.apply_patch(strimzi_pod(), json.loads(text))
    return result


def pod_specs() -> Iterator[tuple[str, Path, dict[str, Any], dict[str, str]]]:
    """(name, directory, pod spec, pod labels) for every workload template, plus the Strimzi pod after
    injection."""
    for f, d in manifests():
        if d.get("kind") in ("StatefulSet", "Deployment"):
            t = d["spec"]["template"]
            yield f"{d['kind']}/{d['metadata']['name']}", f.parent, t["spec"], t["metadata"]["labels"]
    pod = injected_strimzi_pod()
    yield "strimzi-pod", K8S / "strimzi", pod["spec"], pod["metadata"]["labels"]


@dataclass(frozen=True)
class Sidecar:
    where: str
    directory: Path
    spec: dict[str, Any]
    container: dict[str, Any]


def rlm_containers() -> Iterator[Sidecar]:
    for name, directory, spec, _ in pod_specs():
        for c in spec["containers"]:
            if c["image"].startswith(SIDECAR_IMAGE):
                yield Sidecar(name, directory, spec, c)


def sidecar(where: str) -> Sidecar:
    return next(s for s in rlm_containers() if s.where == where)


def mounted_config(sc: Sidecar) -> DaemonConfig:
    """Load the rlm.yaml the container's --config points at, from the ConfigMap mounted there."""
    spec, c = sc.spec, sc.container
    args = c.get("args", [])
    joined = " ".join(args)
    path = joined.split("--config", 1)[1].split()[0]
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    cm = config_maps(sc.directory)[vol["configMap"]["name"]]
    raw = yaml.safe_load(cm["data"][Path(path).name])
    if "RLM_LOG_DIRS" in joined:  # the Strimzi wrapper: log_dirs found at start
        raw["log_dirs"] = ["/var/lib/kafka/data-0/kafka-log0"]
    saved = {k: v for k, v in os.environ.items() if k.startswith("RLM_")}
    for k in saved:
        del os.environ[k]
    try:
        return load_config(None, **raw)
    finally:
        os.environ.update(saved)


@pytest.mark.parametrize("path,doc", manifests(), ids=lambda x: x.name if isinstance(x, Path) else "")
def test_validates_against_kubernetes_schema(path: Path, doc: dict[str, Any]) -> None:
    if doc["kind"] in CUSTOM_KINDS:
        assert "/" in doc["apiVersion"] and doc["metadata" if doc["kind"] != "Kustomization" else "kind"]
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_injected_strimzi_pod_validates() -> None:
    kubernetes_validate.validate(injected_strimzi_pod(), K8S_VERSION, strict=True)


def test_kyverno_policy_injects_the_same_container_as_the_patch() -> None:
    (policy,) = load_yaml_docs(K8S / "strimzi" / "kyverno-policy.yaml")
    merged = policy["spec"]["rules"][0]["mutate"]["patchStrategicMerge"]["spec"]
    patch = json.loads((K8S / "strimzi" / "sidecar-patch.json").read_text())
    patch_container = next(op["value"] for op in patch if op["path"] == "/spec/containers/-")
    assert merged["containers"] == [patch_container]
    patch_vols = [op["value"] for op in patch if op["path"] == "/spec/volumes/-"]
    norm = json.dumps(patch_vols).replace("rlm-work-POD_NAME", "rlm-work-{{request.object.metadata.name}}")
    assert merged["volumes"] == json.loads(norm)
    labels = policy["spec"]["rules"][0]["match"]["any"][0]["resources"]["selector"]["matchLabels"]
    assert labels.items() <= strimzi_pod()["metadata"]["labels"].items()


def test_sidecars_found() -> None:
    names = {s.where for s in rlm_containers()}
    assert {"StatefulSet/kafka", "Deployment/rlm-serve", "strimzi-pod"} <= names


@pytest.mark.parametrize("where", ["StatefulSet/kafka", "strimzi-pod"])
def test_broker_sidecar_invariants(where: str) -> None:
    sc = sidecar(where)
    spec, c = sc.spec, sc.container
    cfg = mounted_config(sc)
    broker = next(x for x in spec["containers"] if not x["image"].startswith(SIDECAR_IMAGE))
    # log dirs: inside a volume the broker mounts read-write and the sidecar mounts read-only
    for d in cfg.log_dirs:
        mine = [m for m in c["volumeMounts"] if f"{d}/".startswith(m["mountPath"].rstrip("/") + "/")]
        assert mine, f"{d} is not mounted in the sidecar"
        assert all(m.get("readOnly") is True for m in mine), f"{d} must be mounted read-only"
        theirs = [m for m in broker["volumeMounts"] if m["name"] in {x["name"] for x in mine}]
        assert theirs and not any(m.get("readOnly") for m in theirs), "same volume as the broker's log dir"
    for m in c["volumeMounts"]:
        if m["name"] in {x["name"] for x in broker["volumeMounts"]}:
            assert m.get("readOnly") is True, f"the sidecar must not write the broker's volume {m['name']}"
    # the work dir is writable and not on the broker's volume
    work = next(m for m in c["volumeMounts"] if str(cfg.work_dir).startswith(m["mountPath"]))
    assert not work.get("readOnly") and work["name"] not in {x["name"] for x in broker["volumeMounts"]}
    grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    assert grace > cfg.shutdown_timeout_s, "the kubelet must not SIGKILL a drain"
    assert cfg.bootstrap_servers and cfg.metadata.manager == "topic"


def test_every_rlm_container_invariants() -> None:
    for side in rlm_containers():
        where, c = side.where, side.container
        cfg = mounted_config(side)
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc.get("runAsUser", 1) != 0, where
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, where
        assert sc["capabilities"]["drop"] == ["ALL"], where
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), where
        assert "memory" in c["resources"]["limits"], where
        assert not c["image"].endswith(":latest") and ":" in c["image"], where
        # ports: the named port is the one the command serves on (rlm run: http.port for /metrics and
        # /health; rlm serve: read.http_port for the API), bound on all interfaces
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        if "serve" in c.get("args", []):
            host, served = cfg.read.http_host, cfg.read.http_port
        else:
            assert cfg.http.enabled, where
            host, served = cfg.http.host, cfg.http.port
        assert host == "0.0.0.0", where
        assert served in ports.values(), f"{where}: no containerPort for port {served}"
        for probe in ("livenessProbe", "readinessProbe"):
            get = c[probe]["httpGet"]
            port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
            assert port == served, f"{where} {probe}"
            assert get["path"].startswith("/")
        # read-only root: /tmp is a volume (numba's cache, tempfiles)
        assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), where
        # secrets come from Secrets, never literals
        for e in c.get("env", []):
            if any(w in e["name"] for w in ("SECRET", "KEY", "PASSWORD", "TOKEN")):
                assert "valueFrom" in e and "value" not in e, f"{where}: {e['name']}"


@pytest.mark.slow
def test_probe_paths_are_served_by_the_daemon(live_daemon: LiveDaemon) -> None:
    """The `rlm run` sidecars' probes hit endpoints a real daemon answers 200 on."""
    checked = 0
    for side in rlm_containers():
        where, c = side.where, side.container
        if "serve" in c.get("args", []):
            continue  # rlm serve: endpoints of the read side (not in this checkout yet)
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in c:
                path = c[probe]["httpGet"]["path"]
                assert live_daemon.get(path) == 200, f"{where} {probe} {path}"
                checked += 1
    assert checked >= 4
    assert live_daemon.get("/metrics") == 200


def test_serve_deployment_and_service() -> None:
    (dep,) = by_kind("Deployment")
    side = sidecar("Deployment/rlm-serve")
    c = side.container
    assert c["args"][:1] == ["serve"]
    cfg = mounted_config(side)
    assert cfg.log_dirs == [], "the read side needs no broker log dir"
    assert cfg.bootstrap_servers and cfg.storage.plugin == "s3" and cfg.metadata.manager == "topic"
    svc = next(s for s in by_kind("Service") if s["metadata"]["name"] == "rlm-serve")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    names = {p["name"] for p in c["ports"]}
    assert all(p["targetPort"] in names for p in svc["spec"]["ports"])


def test_monitors_select_the_sidecar_port() -> None:
    pods = {n: labels for n, _, _, labels in pod_specs()}
    sts_labels = pods["StatefulSet/kafka"]
    sts_ports = {p["name"] for p in sidecar("StatefulSet/kafka").container["ports"]}
    (pm,) = by_kind("PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["spec"]["selector"]["matchLabels"].items() <= sts_labels.items()
    assert all(e["port"] in sts_ports and e["path"] == "/metrics" for e in pm["spec"]["podMetricsEndpoints"])
    (sm,) = by_kind("ServiceMonitor")
    svc = next(
        s for s in by_kind("Service")
        if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"].get("labels", {}).items()
    )
    assert svc["spec"]["selector"].items() <= sts_labels.items()
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for e in sm["spec"]["endpoints"]:
        assert svc_ports[e["port"]]["targetPort"] in sts_ports
    for mon in (pm, sm):
        eps = mon["spec"].get("podMetricsEndpoints") or mon["spec"]["endpoints"]
        # the alerts select job=~"rlm.*"
        assert all(any(r.get("replacement") == "rlm" for r in e.get("relabelings", [])) for e in eps)


def test_kustomizations_list_existing_files() -> None:
    for f in K8S.rglob("kustomization.yaml"):
        (k,) = load_yaml_docs(f)
        for r in k["resources"]:
            assert (f.parent / r).exists(), f"{f}: {r}"
        others = {p.name for p in f.parent.glob("*.yaml")} - {"kustomization.yaml", "servicemonitor.yaml"}
        assert others <= set(k["resources"]), f"{f} misses {others - set(k['resources'])}"


def test_strimzi_volume_and_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = injected_strimzi_pod()
    c = next(x for x in pod["spec"]["containers"] if x["name"] == "rlm")
    assert "RLM_LOG_DIRS" in c["args"][0] and "/var/lib/kafka/data-0/kafka-log" in c["args"][0]
    pvc_names = {d["metadata"]["name"] for d in by_kind("PersistentVolumeClaim")}
    work = next(v for v in pod["spec"]["volumes"] if v["name"] == "rlm-work")
    assert work["persistentVolumeClaim"]["claimName"] in pvc_names
    # the ConfigMap leaves log_dirs to the wrapper, which sets RLM_LOG_DIRS: that override must work
    raw = yaml.safe_load(config_maps(K8S / "strimzi")["rlm-config"]["data"]["rlm.yaml"])
    assert raw["log_dirs"] == []
    f = tmp_path / "rlm.yaml"
    f.write_text(yaml.safe_dump(raw))
    for k in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("RLM_LOG_DIRS", '["/var/lib/kafka/data-0/kafka-log3"]')
    cfg = load_config(f)
    assert [str(d) for d in cfg.log_dirs] == ["/var/lib/kafka/data-0/kafka-log3"]
