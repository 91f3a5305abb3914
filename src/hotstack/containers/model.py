"""What a runtime tells about a container, in Inspektor Gadget's field names."""

from __future__ import annotations

from dataclasses import dataclass, field

# Labels kubelet puts on every container it creates (CRI and dockershim alike).
K8S_NAMESPACE = "io.kubernetes.pod.namespace"
K8S_POD_NAME = "io.kubernetes.pod.name"
K8S_POD_UID = "io.kubernetes.pod.uid"
K8S_CONTAINER_NAME = "io.kubernetes.container.name"


class RuntimeUnavailable(Exception):
    """The runtime's API cannot be reached (no socket, daemon down): ask the next runtime."""


@dataclass(frozen=True)
class ContainerMetadata:
    container_id: str
    name: str                 # the runtime's name for it (Docker's without its leading '/')
    runtime: str              # docker | containerd | cri-o
    image: str = ""
    pid: int = 0
    started_at: str = ""
    labels: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def k8s_namespace(self) -> str:
        return self.labels.get(K8S_NAMESPACE, "")

    @property
    def k8s_pod_name(self) -> str:
        return self.labels.get(K8S_POD_NAME, "")

    @property
    def k8s_container_name(self) -> str:
        return self.labels.get(K8S_CONTAINER_NAME, "")

    @property
    def k8s_pod_uid(self) -> str:
        return self.labels.get(K8S_POD_UID, "")

    def fields(self) -> dict[str, object]:
        """The gadget's enrichment fields (Inspektor Gadget's `runtime.*` and `k8s.*` names)."""
        return {"runtime.containerName": self.name, "runtime.runtimeName": self.runtime,
                "runtime.containerId": self.container_id, "runtime.containerPid": self.pid,
                "runtime.containerImageName": self.image, "runtime.containerStartedAt": self.started_at,
                "k8s.namespace": self.k8s_namespace, "k8s.podName": self.k8s_pod_name,
                "k8s.containerName": self.k8s_container_name}
