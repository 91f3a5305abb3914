"""`hotstack run profile_cpu` fills runtime.containerName, runtime.containerId and the k8s.*
fields of a real container's samples as Inspektor Gadget does (the seed guide filters by
runtime_containerName): the id from the process's cgroup, the names from the Docker Engine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import json_rows

pytestmark = pytest.mark.root


def test_profile_cpu_json_names_a_docker_container(docker_engine, spin_image):
    labels = {"io.kubernetes.pod.namespace": "shop", "io.kubernetes.pod.name": "cart-0",
              "io.kubernetes.container.name": "cart"}
    cid = docker_engine.run(spin_image, "hotstack-gadget-cart", ["/spin"], labels=labels)
    pid = docker_engine.pid("hotstack-gadget-cart")
    r = subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(pid), "--timeout", "3",
                        "-o", "json"], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "DOCKER_HOST": docker_engine.host})
    assert r.returncode == 0, r.stderr
    rows = [row for row in json_rows(r.stdout) if row["proc"]["pid"] == pid]
    assert rows, r.stdout[:2000]
    row = rows[0]
    assert row["runtime"]["containerId"] == cid
    assert row["runtime"]["containerName"] == "hotstack-gadget-cart"
    assert (row["k8s"]["namespace"], row["k8s"]["podName"], row["k8s"]["containerName"]) == ("shop", "cart-0", "cart")


def test_container_flags_select_rows_as_ig(docker_engine, spin_image):
    """-c NAME keeps a container's rows, -c '!NAME' leaves them out, --k8s-namespace/--k8s-podname/
    --k8s-containername match the names kubelet's labels give (the same fields -o json shows)."""
    shop = {"io.kubernetes.pod.namespace": "shop", "io.kubernetes.pod.name": "cart-0",
            "io.kubernetes.container.name": "cart"}
    docker_engine.run(spin_image, "hotstack-flags-cart", ["/spin"], labels=shop)
    docker_engine.run(spin_image, "hotstack-flags-other", ["/spin"],
                      labels={**shop, "io.kubernetes.pod.namespace": "ops", "io.kubernetes.pod.name": "other-0"})
    pids = {name: docker_engine.pid(name) for name in ("hotstack-flags-cart", "hotstack-flags-other")}
    env = {**os.environ, "DOCKER_HOST": docker_engine.host}

    def run(*flags: str) -> set[int]:
        argv = [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "3", "-o", "json", *flags]
        for pid in pids.values():
            argv += ["--pid", str(pid)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
        assert r.returncode == 0, r.stderr
        return {row["proc"]["pid"] for row in json_rows(r.stdout)}

    cart, other = pids["hotstack-flags-cart"], pids["hotstack-flags-other"]
    assert run() == {cart, other}
    assert run("-c", "hotstack-flags-cart") == {cart}
    assert run("--containername", "!hotstack-flags-cart") == {other}
    assert run("-n", "ops") == {other}
    assert run("--k8s-podname", "cart-0,nobody") == {cart}
    assert run("--k8s-containername", "cart", "--k8s-namespace", "shop") == {cart}
    assert run("-c", "no-such-container") == set()
