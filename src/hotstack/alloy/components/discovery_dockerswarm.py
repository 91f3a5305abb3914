"""discovery.dockerswarm: the tasks, services or nodes of a Docker Swarm, read from a manager's
Engine API (unix socket, HTTP or HTTPS with Alloy's HTTP client settings), with the labels of
Prometheus' Docker Swarm discovery, which Alloy's component is. pyroscope.ebpf profiles a task's
container by `__meta_dockerswarm_task_container_id` and names its service from
`__meta_dockerswarm_container_label_service_name`, then `__meta_dockerswarm_service_name`.

Refreshing, backoff and health are discovery.docker's (the same Engine API)."""

from __future__ import annotations

import ipaddress

from ..component import register
from ..schema import DURATION, INT, STRING, Arg, BlockArg, ListOf, Schema
from .discovery_docker import API, DiscoveryDocker, sanitize
from .discovery_docker import _validate as _validate_host
from .httpclient import HTTP_CLIENT, HTTPError, get_json

ROLES = ("tasks", "services", "nodes")
P = "__meta_dockerswarm_"


def _validate(args: dict) -> None:
    if args["role"] not in ROLES:
        raise ValueError(f"role {args['role']!r}: expected one of {', '.join(ROLES)}")
    _validate_host(args)


def _labelled(prefix: str, labels: dict | None) -> dict[str, str]:
    return {prefix + sanitize(k): str(v) for k, v in (labels or {}).items()}


def network_labels(networks: list[dict]) -> dict[str, dict[str, str]]:
    """Network id -> its labels (Prometheus' getNetworksLabels)."""
    return {n.get("Id", ""): {P + "network_id": n.get("Id", ""), P + "network_name": n.get("Name", ""),
                              P + "network_scope": n.get("Scope", ""),
                              P + "network_internal": str(bool(n.get("Internal"))).lower(),
                              P + "network_ingress": str(bool(n.get("Ingress"))).lower(),
                              **_labelled(P + "network_label_", n.get("Labels"))}
            for n in networks}


def node_labels(node: dict, manager: bool = False) -> dict[str, str]:
    """A node's labels; with `manager`, those the nodes role adds (leader, reachability, address)."""
    desc, status, spec = node.get("Description") or {}, node.get("Status") or {}, node.get("Spec") or {}
    platform = desc.get("Platform") or {}
    labels = {P + "node_id": node.get("ID", ""), P + "node_role": spec.get("Role", ""),
              P + "node_availability": spec.get("Availability", ""), P + "node_hostname": desc.get("Hostname", ""),
              P + "node_platform_architecture": platform.get("Architecture", ""),
              P + "node_platform_os": platform.get("OS", ""),
              P + "node_engine_version": (desc.get("Engine") or {}).get("EngineVersion", ""),
              P + "node_status": status.get("State", ""), P + "node_address": status.get("Addr", ""),
              **_labelled(P + "node_label_", spec.get("Labels"))}
    status_of_manager = node.get("ManagerStatus")
    if manager and status_of_manager:
        labels[P + "node_manager_leader"] = str(bool(status_of_manager.get("Leader"))).lower()
        labels[P + "node_manager_reachability"] = status_of_manager.get("Reachability", "")
        labels[P + "node_manager_address"] = status_of_manager.get("Addr", "")
    return labels


def service_mode(service: dict) -> str:
    mode = (service.get("Spec") or {}).get("Mode") or {}
    return "global" if "Global" in mode else "replicated" if "Replicated" in mode else ""


def service_labels(service: dict) -> dict[str, str]:
    spec = service.get("Spec") or {}
    return {P + "service_id": service.get("ID", ""), P + "service_name": spec.get("Name", ""),
            P + "service_mode": service_mode(service), **_labelled(P + "service_label_", spec.get("Labels"))}


def _host_port(ip: str, port) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _ip_of(cidr: str) -> str | None:
    try:
        return str(ipaddress.ip_interface(cidr).ip)
    except ValueError:
        return None


def _tcp(ports: list[dict] | None) -> list[dict]:
    return [p for p in ports or () if p.get("Protocol", "tcp") == "tcp"]


def task_targets(tasks: list[dict], services: list[dict], nodes: list[dict], networks: list[dict],
                 port: int) -> list[dict[str, str]]:
    """One target per published port of a task, and per address x service port of its network
    attachments (the default port where the service has none), as Prometheus' tasks role."""
    by_service = {s.get("ID", ""): s for s in services}
    by_node = {n.get("ID", ""): node_labels(n) for n in nodes}
    nets = network_labels(networks)
    out = []
    for t in tasks:
        status = t.get("Status") or {}
        common = {P + "task_id": t.get("ID", ""), P + "task_desired_state": t.get("DesiredState", ""),
                  P + "task_state": status.get("State", ""), P + "task_slot": str(t.get("Slot", 0))}
        container = status.get("ContainerStatus")
        if container is not None:
            common[P + "task_container_id"] = container.get("ContainerID", "")
        common.update(_labelled(P + "container_label_", ((t.get("Spec") or {}).get("ContainerSpec") or {})
                                .get("Labels")))
        service = by_service.get(t.get("ServiceID", ""))
        if service is not None:
            common.update(service_labels(service))
        common.update(by_node.get(t.get("NodeID", ""), {}))
        for p in _tcp((status.get("PortStatus") or {}).get("Ports")):
            out.append({**common, P + "task_port_publish_mode": p.get("PublishMode", ""),
                        "__address__": _host_port("", p.get("PublishedPort", 0))})
        ports = _tcp(((service or {}).get("Endpoint") or {}).get("Ports"))
        for attachment in t.get("NetworksAttachments") or ():
            network = nets.get((attachment.get("Network") or {}).get("ID", ""), {})
            for address in attachment.get("Addresses") or ():
                ip = _ip_of(address)
                if ip is None:
                    continue
                for p in ports or [None]:
                    labels = {**common, **network}
                    if p is None:
                        labels["__address__"] = _host_port(ip, port)
                    else:
                        labels[P + "task_port_publish_mode"] = p.get("PublishMode", "")
                        labels["__address__"] = _host_port(ip, p.get("TargetPort", 0))
                    out.append(labels)
    return out


def service_targets(services: list[dict], networks: list[dict], port: int) -> list[dict[str, str]]:
    """One target per virtual IP x published TCP port of a service (the default port where it
    has none), as Prometheus' services role."""
    nets = network_labels(networks)
    out = []
    for s in services:
        template = (((s.get("Spec") or {}).get("TaskTemplate") or {}).get("ContainerSpec") or {})
        common = {**service_labels(s), P + "service_task_container_hostname": template.get("Hostname", ""),
                  P + "service_task_container_image": template.get("Image", "")}
        if s.get("UpdateStatus"):
            common[P + "service_updating_status"] = s["UpdateStatus"].get("State", "")
        endpoint = s.get("Endpoint") or {}
        for vip in endpoint.get("VirtualIPs") or ():
            ip = _ip_of(vip.get("Addr", ""))
            if ip is None:
                continue
            labels = {**common, **nets.get(vip.get("NetworkID", ""), {})}
            ports = _tcp(endpoint.get("Ports"))
            for p in ports:
                out.append({**labels, P + "service_endpoint_port_name": p.get("Name", ""),
                            P + "service_endpoint_port_publish_mode": p.get("PublishMode", ""),
                            "__address__": _host_port(ip, p.get("PublishedPort", 0))})
            if not ports:
                out.append({**labels, "__address__": _host_port(ip, port)})
    return out


def node_targets(nodes: list[dict], port: int) -> list[dict[str, str]]:
    return [{**node_labels(n, manager=True), "__address__": _host_port((n.get("Status") or {}).get("Addr", ""), port)}
            for n in nodes]


@register
class DiscoveryDockerSwarm(DiscoveryDocker):
    name = "discovery.dockerswarm"
    schema = Schema([
        Arg("host", STRING, required=True), Arg("role", STRING, required=True), Arg("port", INT, 80),
        Arg("refresh_interval", DURATION, 60.0),
        BlockArg("filter", Schema([Arg("name", STRING, required=True),
                                   Arg("values", ListOf(STRING), required=True)]), repeated=True),
        *HTTP_CLIENT,
    ], validate=_validate)

    def _list(self, path: str, query: str = "") -> list[dict]:
        found = get_json(self._url(), f"{API}/{path}{query}", client=self._http)
        if not isinstance(found, list):
            raise HTTPError(f"the Docker API answered /{path} with an unexpected shape")
        return found

    def refresh(self) -> None:
        query = self.filters_query()
        role, port = self.args["role"], self.args["port"]
        if role == "nodes":
            listed = self._list("nodes", query)
            targets = node_targets(listed, port)
        elif role == "services":
            listed = self._list("services", query)
            targets = service_targets(listed, self._list("networks"), port)
        else:
            listed = self._list("tasks", query)
            targets = task_targets(listed, self._list("services"), self._list("nodes"), self._list("networks"), port)
        self._containers = len(listed)
        self.publish(targets=[{k: v for k, v in t.items() if v != ""} for t in targets])
        self.set_health("healthy", f"{len(listed)} {role}")

    def _unreachable(self, e: HTTPError) -> None:
        self.set_health("unhealthy", f"{e} (is this Docker Engine a Swarm manager, its socket mounted? retrying)")

    def debug_info(self) -> dict:
        return {self.args["role"]: self._containers, "targets": len(self.exports["targets"])}
