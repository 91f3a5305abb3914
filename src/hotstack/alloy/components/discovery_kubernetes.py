"""discovery.kubernetes: pods (role "pod") or nodes (role "node") from the Kubernetes API, kept
current by list+watch, with the labels Prometheus' Kubernetes discovery gives them.

`attach_metadata { node = true }` adds the labels of each pod's node, `namespace = true` those
of its namespace (both watched too). The other roles are refused with the reason.
"""

from __future__ import annotations

import re
import threading

from ...errors import ConfigError
from ..component import Component, register
from ..schema import BOOL, STRING, Arg, BlockArg, ListOf, Schema
from .httpclient import HTTP_CLIENT, HTTPClientConfig, validate_http_client
from .kubeapi import KubeClient, ResourceWatch, from_kubeconfig, in_cluster

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
ROLES = ("pod", "node", "service", "endpoints", "endpointslice", "ingress")
SUPPORTED_ROLES = ("pod", "node")
# The order in which Prometheus picks a node's address (k8s' preferred address types).
_NODE_ADDRESS_ORDER = ("InternalIP", "InternalDNS", "ExternalIP", "ExternalDNS", "LegacyHostIP", "Hostname")


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def _validate(args: dict) -> None:
    if args["role"] not in ROLES:
        raise ValueError(f"role {args['role']!r} is not one of {', '.join(ROLES)}")
    if args["role"] not in SUPPORTED_ROLES:
        raise ValueError(f"role {args['role']!r}: not supported yet (hotstack discovers pods and nodes)")
    for s in args["selectors"]:
        if s["role"] not in ROLES:
            raise ValueError(f"selectors role {s['role']!r} is not one of {', '.join(ROLES)}")
        if s["role"] != args["role"] and not (args["role"] == "pod" and s["role"] == "node"
                                               and args["attach_metadata"]["node"]):
            raise ValueError(f"selectors role {s['role']!r} does not match the component role {args['role']!r}")
    if args["api_server"] and args["kubeconfig_file"]:
        raise ValueError("set either api_server or kubeconfig_file, not both")
    validate_http_client(args)


def _meta_labels(prefix: str, meta: dict) -> dict[str, str]:
    out = {}
    for kind, items in (("label", meta.get("labels") or {}), ("annotation", meta.get("annotations") or {})):
        for k, v in items.items():
            out[f"{prefix}_{kind}_{sanitize(k)}"] = v
            out[f"{prefix}_{kind}present_{sanitize(k)}"] = "true"
    return out


def node_metadata(node: dict) -> dict[str, str]:
    """What a node adds to a pod target (attach_metadata.node) and starts a node target with."""
    meta = node.get("metadata") or {}
    return {"__meta_kubernetes_node_name": meta.get("name", ""), **_meta_labels("__meta_kubernetes_node", meta)}


def namespace_metadata(namespace: dict) -> dict[str, str]:
    return _meta_labels("__meta_kubernetes_namespace", namespace.get("metadata") or {})


def node_targets(node: dict) -> list[dict[str, str]]:
    """One target per node: the kubelet's address, `instance` = the node name (role "node")."""
    status = node.get("status") or {}
    by_type: dict[str, list[str]] = {}
    for a in status.get("addresses") or []:
        by_type.setdefault(a.get("type", ""), []).append(a.get("address", ""))
    host = next((by_type[t][0] for t in _NODE_ADDRESS_ORDER if by_type.get(t)), "")
    if not host:
        return []   # as Prometheus: a node without an address gives no target
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port", 10250)
    target = {**node_metadata(node), "__meta_kubernetes_node_provider_id": (node.get("spec") or {}).get("providerID", ""),
              "__address__": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
              "instance": (node.get("metadata") or {}).get("name", "")}
    for t, addresses in by_type.items():
        target[f"__meta_kubernetes_node_address_{sanitize(t)}"] = addresses[0]
    return [{k: v for k, v in target.items() if v != ""}]


def pod_targets(pod: dict, extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    """One target per declared container port, or one port-less target per container."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    pod_ip = status.get("podIP", "")
    common = {
        **(extra or {}),
        "__meta_kubernetes_namespace": meta.get("namespace", ""),
        "__meta_kubernetes_pod_name": meta.get("name", ""),
        "__meta_kubernetes_pod_ip": pod_ip,
        "__meta_kubernetes_pod_ready": "unknown",
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        **_meta_labels("__meta_kubernetes_pod", meta),
    }
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            common["__meta_kubernetes_pod_ready"] = str(cond.get("status", "unknown")).lower()
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            common["__meta_kubernetes_pod_controller_kind"] = ref.get("kind", "")
            common["__meta_kubernetes_pod_controller_name"] = ref.get("name", "")
    ids = {}
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        ids[cs.get("name")] = cs.get("containerID", "")
    out = []
    for init, containers in ((False, spec.get("containers") or []), (True, spec.get("initContainers") or [])):
        for c in containers:
            labels = {**common, "__meta_kubernetes_pod_container_name": c.get("name", ""),
                      "__meta_kubernetes_pod_container_image": c.get("image", ""),
                      "__meta_kubernetes_pod_container_init": str(init).lower(),
                      "__meta_kubernetes_pod_container_id": ids.get(c.get("name"), "")}
            ports = c.get("ports") or []
            if not ports:
                out.append({**labels, "__address__": pod_ip})
            for p in ports:
                out.append({**labels, "__address__": f"{pod_ip}:{p.get('containerPort')}",
                            "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                            "__meta_kubernetes_pod_container_port_number": str(p.get("containerPort", "")),
                            "__meta_kubernetes_pod_container_port_protocol": p.get("protocol", "TCP")})
    return [{k: v for k, v in t.items() if v != ""} for t in out]


@register
class DiscoveryKubernetes(Component):
    name = "discovery.kubernetes"
    schema = Schema([
        Arg("role", STRING, required=True), Arg("api_server", STRING, ""), Arg("kubeconfig_file", STRING, ""),
        BlockArg("namespaces", Schema([Arg("names", ListOf(STRING), []), Arg("own_namespace", BOOL, False)])),
        BlockArg("selectors", Schema([Arg("role", STRING, required=True), Arg("field", STRING, ""),
                                      Arg("label", STRING, "")]), repeated=True),
        BlockArg("attach_metadata", Schema([Arg("node", BOOL, False), Arg("namespace", BOOL, False)])),
        *HTTP_CLIENT,
    ], validate=_validate)
    initial_exports = {"targets": []}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self.client: KubeClient | None = None
        self.watches: dict[str, ResourceWatch] = {}   # "pods:<path>", "nodes", "namespaces"
        self._publish_lock = threading.Lock()

    def _client(self) -> KubeClient:
        a = self.args
        if a["kubeconfig_file"]:
            return from_kubeconfig(a["kubeconfig_file"])
        if a["api_server"]:
            return KubeClient(a["api_server"], HTTPClientConfig(a))
        return in_cluster()

    def _selectors(self, role: str) -> dict[str, str]:
        sel = [s for s in self.args["selectors"] if s["role"] == role]
        return {"fieldSelector": ",".join(s["field"] for s in sel if s["field"]),
                "labelSelector": ",".join(s["label"] for s in sel if s["label"])}

    def _pod_paths(self) -> list[str]:
        ns = self.args["namespaces"]
        names = list(ns["names"])
        if ns["own_namespace"]:
            names.append(self.client.namespace)
        return [f"/api/v1/namespaces/{n}/pods" for n in names] or ["/api/v1/pods"]

    def start(self) -> None:
        """Never fails for an unreachable API (a DaemonSet may start before it): the watches
        report unhealthy and retry with backoff until it answers."""
        try:
            self.client = self._client()
        except ValueError as e:
            raise ConfigError(f"{self.id}: {e}") from None
        a = self.args
        wanted: dict[str, tuple[str, str]] = {}
        if a["role"] == "pod":
            wanted.update({f"pods:{p}": (p, "pod") for p in self._pod_paths()})
            if a["attach_metadata"]["node"]:
                wanted["nodes"] = ("/api/v1/nodes", "node")
            if a["attach_metadata"]["namespace"]:
                wanted["namespaces"] = ("/api/v1/namespaces", "namespace")
        else:
            wanted["nodes"] = ("/api/v1/nodes", "node")
        for key, (path, role) in wanted.items():
            self.watches[key] = ResourceWatch(self.client, path, lambda r=role: self._selectors(r),
                                              self._publish, self._status)
        for w in self.watches.values():
            w.start()

    def _status(self, _watch: ResourceWatch) -> None:
        failing = [w for w in self.watches.values() if w.error]
        if failing:
            self.set_health("unhealthy", f"{failing[0].error} (retrying with backoff)")
        elif all(w.synced for w in self.watches.values()):
            self.set_health("healthy", self._summary())

    def _summary(self) -> str:
        counts = {}
        for key, w in self.watches.items():
            kind = key.split(":")[0]
            counts[kind] = counts.get(kind, 0) + len(w.objects)
        return ", ".join(f"{n} {k}" for k, n in counts.items())

    def _publish(self) -> None:
        with self._publish_lock:
            if self.args["role"] == "node":
                targets = [t for n in self.watches["nodes"].snapshot() for t in node_targets(n)]
            else:
                nodes = {o["metadata"]["name"]: node_metadata(o)
                         for o in self.watches["nodes"].snapshot()} if "nodes" in self.watches else {}
                namespaces = {o["metadata"]["name"]: namespace_metadata(o)
                              for o in self.watches["namespaces"].snapshot()} if "namespaces" in self.watches else {}
                targets = []
                for key, w in sorted(self.watches.items()):
                    if not key.startswith("pods:"):
                        continue
                    for pod in w.snapshot():
                        extra = {**namespaces.get((pod.get("metadata") or {}).get("namespace", ""), {}),
                                 **nodes.get((pod.get("spec") or {}).get("nodeName", ""), {})}
                        targets.extend(pod_targets(pod, extra))
            self.publish(targets=targets)
        if self.health.state == "healthy":
            self.set_health("healthy", self._summary())

    def stop(self) -> None:
        for w in self.watches.values():
            w.stop()

    def debug_info(self) -> dict:
        return {**{k: {"objects": len(w.objects), "error": w.error} for k, w in self.watches.items()},
                "targets": len(self.exports["targets"]), "server": self.client.server if self.client else ""}
