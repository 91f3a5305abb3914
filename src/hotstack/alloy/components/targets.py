"""How a target names what it profiles: a pid or a container id (research notes §1, §3)."""

from __future__ import annotations

_RUNTIME_PREFIXES = ("docker://", "containerd://", "cri-o://")


def _k8s_container_id(value: str) -> str:
    for prefix in _RUNTIME_PREFIXES:
        if value.startswith(prefix):
            return value[len(prefix):]
    return ""   # any other runtime prefix gives no match


def container_id_of_target(target: dict[str, str], swarm: bool = True) -> str:
    """The container id a target names: __container_id__, the pod container id (prefix stripped),
    the docker container id, then the swarm task container id."""
    if target.get("__container_id__"):
        return target["__container_id__"]
    if target.get("__meta_kubernetes_pod_container_id"):
        return _k8s_container_id(target["__meta_kubernetes_pod_container_id"])
    if target.get("__meta_docker_container_id"):
        return target["__meta_docker_container_id"]
    if swarm:
        return target.get("__meta_dockerswarm_task_container_id", "")
    return ""


def pid_of_target(target: dict[str, str]) -> int | None:
    value = target.get("__process_pid__")
    if value is None:
        return None
    try:
        pid = int(value)
    except ValueError:
        return None
    return pid if 0 <= pid < 2 ** 32 else None


def infer_service_name(target: dict[str, str]) -> str:
    """service_name when the target has none, in the order pyroscope.ebpf uses (notes §1)."""
    t = target
    if t.get("__meta_kubernetes_pod_annotation_pyroscope_io_service_name"):
        return t["__meta_kubernetes_pod_annotation_pyroscope_io_service_name"]
    if t.get("__meta_kubernetes_namespace") and t.get("__meta_kubernetes_pod_container_name"):
        return f"ebpf/{t['__meta_kubernetes_namespace']}/{t['__meta_kubernetes_pod_container_name']}"
    for key in ("__meta_docker_container_name", "__meta_dockerswarm_container_label_service_name",
                "__meta_dockerswarm_service_name"):
        if t.get(key):
            return t[key]
    return "unspecified"
