"""discovery.kubernetes (role "pod"): pods from the Kubernetes API, kept current by a watch."""

from __future__ import annotations

import re
import threading

from ...errors import ConfigError
from ..component import Component, register
from ..schema import BOOL, STRING, Arg, BlockArg, ListOf, Schema
from .httpclient import HTTPError
from .kubeapi import KubeClient, _tls_context, from_kubeconfig, in_cluster

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
ROLES = ("pod", "node", "service", "endpoints", "endpointslice", "ingress")
WATCH_TIMEOUT_S = 300


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def _validate(args: dict) -> None:
    if args["role"] not in ROLES:
        raise ValueError(f"role {args['role']!r} is not one of {', '.join(ROLES)}")
    if args["role"] != "pod":
        raise ValueError(f"role {args['role']!r}: not supported yet (hotstack discovers pods only)")
    for s in args["selectors"]:
        if s["role"] != args["role"]:
            raise ValueError(f"selectors role {s['role']!r} does not match the component role {args['role']!r}")
    if args["api_server"] and args["kubeconfig_file"]:
        raise ValueError("set either api_server or kubeconfig_file, not both")
    if args["bearer_token"] and args["bearer_token_file"]:
        raise ValueError("set either bearer_token or bearer_token_file, not both")
    meta = args["attach_metadata"]
    if meta and meta.get("node"):
        raise ValueError("attach_metadata.node: not supported yet")


def pod_targets(pod: dict) -> list[dict[str, str]]:
    """One target per declared container port, or one port-less target per container."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    pod_ip = status.get("podIP", "")
    common = {
        "__meta_kubernetes_namespace": meta.get("namespace", ""),
        "__meta_kubernetes_pod_name": meta.get("name", ""),
        "__meta_kubernetes_pod_ip": pod_ip,
        "__meta_kubernetes_pod_ready": "unknown",
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
    }
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            common["__meta_kubernetes_pod_ready"] = str(cond.get("status", "unknown")).lower()
    for kind, items in (("label", meta.get("labels") or {}), ("annotation", meta.get("annotations") or {})):
        for k, v in items.items():
            common[f"__meta_kubernetes_pod_{kind}_{sanitize(k)}"] = v
            common[f"__meta_kubernetes_pod_{kind}present_{sanitize(k)}"] = "true"
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
        Arg("bearer_token", STRING, ""), Arg("bearer_token_file", STRING, ""),
        BlockArg("namespaces", Schema([Arg("names", ListOf(STRING), []), Arg("own_namespace", BOOL, False)])),
        BlockArg("selectors", Schema([Arg("role", STRING, required=True), Arg("field", STRING, ""),
                                      Arg("label", STRING, "")]), repeated=True),
        BlockArg("attach_metadata", Schema([Arg("node", BOOL, False), Arg("namespace", BOOL, False)])),
        BlockArg("tls_config", Schema([Arg("ca_file", STRING, ""), Arg("cert_file", STRING, ""),
                                       Arg("key_file", STRING, ""), Arg("insecure_skip_verify", BOOL, False)])),
    ], validate=_validate)
    initial_exports = {"targets": []}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pods: dict[tuple[str, str], dict] = {}   # (namespace, name) -> pod
        self._pods_lock = threading.Lock()
        self.client: KubeClient | None = None

    def _client(self) -> KubeClient:
        a = self.args
        if a["kubeconfig_file"]:
            return from_kubeconfig(a["kubeconfig_file"])
        if a["api_server"]:
            tls = a["tls_config"]
            context = None
            if a["api_server"].startswith("https://"):
                context = _tls_context(ca_file=tls["ca_file"], insecure=tls["insecure_skip_verify"],
                                       cert_file=tls["cert_file"], key_file=tls["key_file"])
            return KubeClient(a["api_server"], token=a["bearer_token"], token_file=a["bearer_token_file"],
                              context=context)
        return in_cluster()

    def _paths(self) -> list[str]:
        ns = self.args["namespaces"]
        names = list(ns["names"])
        if ns["own_namespace"]:
            names.append(self.client.namespace)
        return [f"/api/v1/namespaces/{n}/pods" for n in names] or ["/api/v1/pods"]

    def _params(self) -> dict[str, str]:
        sel = [s for s in self.args["selectors"] if s["role"] == "pod"]
        return {"fieldSelector": ",".join(s["field"] for s in sel if s["field"]),
                "labelSelector": ",".join(s["label"] for s in sel if s["label"])}

    def _list(self, path: str) -> str:
        result = self.client.list(path, self._params())
        with self._pods_lock:
            for key in [k for k, p in self._pods.items() if p.get("_path") == path]:
                del self._pods[key]
            for pod in result.get("items") or []:
                pod["_path"] = path
                m = pod.get("metadata") or {}
                self._pods[(m.get("namespace", ""), m.get("name", ""))] = pod
        self._publish()
        return (result.get("metadata") or {}).get("resourceVersion", "")

    def _publish(self) -> None:
        with self._pods_lock:
            pods = sorted(self._pods.items())
        self.publish(targets=[t for _, pod in pods for t in pod_targets(pod)])

    def start(self) -> None:
        try:
            self.client = self._client()
            versions = {path: self._list(path) for path in self._paths()}
        except HTTPError as e:
            raise ConfigError(f"{self.id}: {e}") from None
        for path, version in versions.items():
            t = threading.Thread(target=self._watch_loop, args=(path, version), name=f"hotstack-{self.id}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _watch_loop(self, path: str, version: str) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list(path)
                for event in self.client.watch(path, {**self._params(), "resourceVersion": version},
                                               WATCH_TIMEOUT_S):
                    if self._stop.is_set():
                        return
                    version = self._apply(path, event, version)
                self.set_health("healthy", f"{len(self._pods)} pods")
                backoff = 1.0
            except (HTTPError, ValueError) as e:
                self.set_health("unhealthy", str(e))
                version = ""
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 30.0)

    def _apply(self, path: str, event: dict, version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return ""   # e.g. 410 Gone: list again
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion", version)
        if kind == "BOOKMARK":
            return version
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self._pods_lock:
            if kind == "DELETED":
                self._pods.pop(key, None)
            else:
                obj["_path"] = path
                self._pods[key] = obj
        self._publish()
        return version

    def stop(self) -> None:
        self._stop.set()

    def debug_info(self) -> dict:
        return {"pods": len(self._pods), "targets": len(self.exports["targets"]),
                "server": self.client.server if self.client else ""}
