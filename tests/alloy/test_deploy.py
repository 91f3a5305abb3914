"""deploy/: manifests valid against the Kubernetes schemas (offline), the image recipe linted,
and the shipped pipeline a valid config that keeps the seed's node selector working."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hotstack.alloy.controller import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        pytest.fail(f"{name} is not installed (pip install '.[test]')")
    return found


def test_manifests_validate_against_kubernetes_schemas():
    r = subprocess.run([_tool("kubernetes-validate"), "--strict", *map(str, MANIFESTS)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("passed") >= 6, r.stdout


def test_image_recipe_lints_clean():
    r = subprocess.run([_tool("hadolint"), str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def _docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))


def test_daemonset_has_what_profiling_needs():
    ds = _docs("daemonset.yaml")[0]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["serviceAccountName"] == "hotstack"
    c = pod["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["HOSTNAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    caps = set(c["securityContext"]["capabilities"]["add"])
    assert {"BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE", "SYS_RESOURCE", "DAC_READ_SEARCH"} <= caps
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/sys/kernel/tracing"]["readOnly"] is True
    assert c["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    # not /-/healthy: it answers 500 while an API is not reachable yet (a DaemonSet started before
    # it), and a liveness probe on it would restart the agent in a loop instead of letting it retry
    assert c["livenessProbe"]["httpGet"]["path"] == "/-/ready"


def test_rbac_lists_and_watches_what_discovery_kubernetes_reads():
    """Pods (role pod), nodes (role node, attach_metadata.node), namespaces (attach_metadata.namespace):
    read only, nothing else."""
    role, binding = _docs("rbac.yaml")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"],
                              "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"][0]["name"] == "hotstack"


def test_configmap_pipeline_is_the_seed_kubernetes_example():
    cm = _docs("configmap.yaml")[0]
    text = cm["data"]["config.alloy"]
    seed = (Path(__file__).parent / "configs" / "kubernetes.alloy").read_text()
    assert text.replace("pyroscope.pyroscope.svc.cluster.local", "pyroscope") == seed
    controller = load_config(text, "configmap")
    assert "discovery.kubernetes.all_pods" in controller.order
