"""Container names from a real Docker Engine, as Inspektor Gadget fills runtime.* and k8s.*:
the id from the process's cgroup, the names from the runtime's API, the Kubernetes names from
the labels kubelet puts on its containers."""

from __future__ import annotations

import os

import pytest

from hotstack.containers import ContainerRuntimes, container_metadata
from hotstack.containers.docker import DockerRuntime
from hotstack.procs.containers import container_id_from_cgroup

from ..runtime_fixtures import CRI_SPIN_IMAGE

pytestmark = pytest.mark.root


def _cgroup_id(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return container_id_from_cgroup(f.read())


def test_names_of_a_docker_container_from_its_process(docker_engine, spin_image):
    cid = docker_engine.run(spin_image, "hotstack-web", ["/spin"])
    pid = docker_engine.pid("hotstack-web")
    assert _cgroup_id(pid) == cid   # the process's cgroup names its container
    runtimes = ContainerRuntimes([DockerRuntime(docker_engine.socket)])
    meta = runtimes.container_metadata(cid)
    assert meta is not None
    assert (meta.name, meta.runtime, meta.image, meta.pid) == ("hotstack-web", "docker", spin_image, pid)
    assert meta.started_at.startswith("20")
    fields = meta.fields()
    assert fields["runtime.containerName"] == "hotstack-web" and fields["runtime.containerId"] == cid
    assert fields["k8s.namespace"] == fields["k8s.podName"] == fields["k8s.containerName"] == ""
    # a real container: its own mount namespace and root filesystem, where only /spin exists
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.path.isfile(f"/proc/{pid}/root/spin") and not os.path.exists(f"/proc/{pid}/root/bin")


def test_kubernetes_names_from_the_container_labels(docker_engine, spin_image):
    labels = {"io.kubernetes.pod.namespace": "shop", "io.kubernetes.pod.name": "checkout-7d9f",
              "io.kubernetes.container.name": "checkout", "io.kubernetes.pod.uid": "0f0e-uid"}
    cid = docker_engine.run(spin_image, "k8s_checkout_checkout-7d9f_shop_0f0e-uid_0", ["/spin"], labels=labels)
    meta = ContainerRuntimes([DockerRuntime(docker_engine.socket)]).container_metadata(cid)
    assert meta is not None
    assert (meta.k8s_namespace, meta.k8s_pod_name, meta.k8s_container_name, meta.k8s_pod_uid) == \
        ("shop", "checkout-7d9f", "checkout", "0f0e-uid")
    assert meta.fields()["k8s.podName"] == "checkout-7d9f"


def test_unknown_ids_and_absent_runtimes(docker_engine, spin_image, tmp_path, monkeypatch):
    now = [0.0]
    runtimes = ContainerRuntimes([DockerRuntime(str(tmp_path / "absent.sock")), DockerRuntime(docker_engine.socket)],
                                 clock=lambda: now[0])
    assert runtimes.container_metadata("f" * 64) is None     # no such container: None, no error
    assert "no Docker socket" in runtimes.errors[str(tmp_path / "absent.sock")]
    assert runtimes.container_metadata("") is None
    # the module-level lookup reads DOCKER_HOST, as the docker CLI does
    cid = docker_engine.run(spin_image, "hotstack-lookup", ["/spin", "idle"])
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    import hotstack.containers.lookup as lookup
    monkeypatch.setattr(lookup, "_default", None)
    meta = container_metadata(cid)
    assert meta is not None and meta.container_id == cid


def test_names_from_containerd_over_the_cri(containerd_cri):
    """A pod made over the CRI as kubelet makes it: the container's name, image and pid, and the
    Kubernetes names from its labels, through RuntimeService.ContainerStatus."""
    from hotstack.containers.cri import CRIRuntime
    cid = containerd_cri.run_pod("shop", "checkout-1", "uid-1", "checkout", CRI_SPIN_IMAGE,
                                 ["/spin"], cgroup_parent=f"/hotstack-cri-test-{os.getpid()}")
    runtimes = ContainerRuntimes([DockerRuntime("/nonexistent/docker.sock"), CRIRuntime(containerd_cri.socket)])
    meta = runtimes.container_metadata(cid)
    assert meta is not None
    assert (meta.name, meta.runtime, meta.image) == ("checkout", "containerd", CRI_SPIN_IMAGE)
    assert meta.fields()["k8s.namespace"] == "shop" and meta.fields()["k8s.podName"] == "checkout-1"
    assert meta.fields()["k8s.containerName"] == "checkout" and meta.k8s_pod_uid == "uid-1"
    assert meta.pid > 0 and _cgroup_id(meta.pid) == cid   # the process's cgroup names the same container
    assert meta.started_at.startswith("20")
    assert runtimes.container_metadata("0" * 64) is None   # NOT_FOUND from the runtime: unknown, no error
