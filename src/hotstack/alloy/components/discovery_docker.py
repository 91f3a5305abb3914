"""discovery.docker: containers of a Docker Engine, listed over its API (unix socket or HTTP)."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse

from ...errors import ConfigError
from ..component import Component, register
from ..schema import BOOL, DURATION, INT, STRING, Arg, BlockArg, ListOf, Schema
from .httpclient import HTTPError, get_json

_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
API = "/v1.41"   # a version every Docker Engine since 20.10 serves


def sanitize(name: str) -> str:
    return _INVALID_LABEL_CHARS.sub("_", name)


def _validate(args: dict) -> None:
    host = args["host"]
    if not re.match(r"^(unix|tcp|http|https)://", host):
        raise ValueError(f"host {host!r} must be a unix://, tcp://, http:// or https:// URL")


def targets_from(containers: list[dict], networks: list[dict], port: int, match_first_network: bool,
                 host_networking_host: str) -> list[dict[str, str]]:
    """Targets as Prometheus' Docker SD builds them: one per container x network x port."""
    nets = {}
    for n in networks:
        labels = {"__meta_docker_network_id": n.get("Id", ""), "__meta_docker_network_name": n.get("Name", ""),
                  "__meta_docker_network_scope": n.get("Scope", ""),
                  "__meta_docker_network_internal": str(bool(n.get("Internal"))).lower(),
                  "__meta_docker_network_ingress": str(bool(n.get("Ingress"))).lower()}
        for k, v in (n.get("Labels") or {}).items():
            labels["__meta_docker_network_label_" + sanitize(k)] = v
        nets[n.get("Id", "")] = labels
    out = []
    for c in containers:
        names = c.get("Names") or []
        if not names:
            continue
        common = {"__meta_docker_container_id": c.get("Id", ""), "__meta_docker_container_name": names[0],
                  "__meta_docker_container_network_mode": (c.get("HostConfig") or {}).get("NetworkMode", "")}
        for k, v in (c.get("Labels") or {}).items():
            common["__meta_docker_container_label_" + sanitize(k)] = v
        networks_of = (c.get("NetworkSettings") or {}).get("Networks") or {}
        added = False
        for _, net in sorted(networks_of.items()):
            labels = dict(common)
            labels.update(nets.get(net.get("NetworkID", ""), {}))
            ip = net.get("IPAddress", "")
            labels["__meta_docker_network_ip"] = ip
            ports = c.get("Ports") or []
            if ports:
                for p in ports:
                    if p.get("Type", "tcp") != "tcp":
                        continue
                    t = dict(labels)
                    t["__meta_docker_port_private"] = str(p.get("PrivatePort", ""))
                    if p.get("PublicPort"):
                        t["__meta_docker_port_public"] = str(p["PublicPort"])
                        t["__meta_docker_port_public_ip"] = p.get("IP", "")
                    t["__address__"] = f"{ip}:{p.get('PrivatePort', '')}"
                    out.append(t)
            else:
                host = host_networking_host if common["__meta_docker_container_network_mode"] == "host" else ip
                labels["__address__"] = f"{host}:{port}"
                out.append(labels)
            added = True
            if match_first_network:
                break
        if not added:
            out.append({**common, "__address__": f"{host_networking_host}:{port}"})
    return [{k: v for k, v in t.items() if v != ""} for t in out]


@register
class DiscoveryDocker(Component):
    name = "discovery.docker"
    schema = Schema([
        Arg("host", STRING, required=True), Arg("port", INT, 80), Arg("host_networking_host", STRING, "localhost"),
        Arg("refresh_interval", DURATION, 60.0), Arg("match_first_network", BOOL, True),
        BlockArg("filter", Schema([Arg("name", STRING, required=True),
                                   Arg("values", ListOf(STRING), required=True)]), repeated=True),
    ], validate=_validate)
    initial_exports = {"targets": []}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._containers = 0

    def _url(self) -> str:
        host = self.args["host"]
        return "http://" + host[len("tcp://"):] if host.startswith("tcp://") else host

    def refresh(self) -> None:
        filters = {}
        for f in self.args["filter"]:
            filters.setdefault(f["name"], []).extend(f["values"])
        query = "?" + urllib.parse.urlencode({"filters": json.dumps(filters)}) if filters else ""
        containers = get_json(self._url(), f"{API}/containers/json{query}")
        networks = get_json(self._url(), f"{API}/networks")
        if not isinstance(containers, list) or not isinstance(networks, list):
            raise HTTPError("the Docker API answered with an unexpected shape")
        self._containers = len(containers)
        self.publish(targets=targets_from(containers, networks, self.args["port"],
                                          self.args["match_first_network"], self.args["host_networking_host"]))

    def start(self) -> None:
        try:
            self.refresh()
        except HTTPError as e:
            raise ConfigError(f"{self.id}: {e} (is the Docker daemon running and its socket mounted?)") from None
        self._thread = threading.Thread(target=self._loop, name=f"hotstack-{self.id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.args["refresh_interval"]):
            try:
                self.refresh()
                self.set_health("healthy", f"{self._containers} containers")
            except HTTPError as e:
                self.set_health("unhealthy", str(e))

    def stop(self) -> None:
        self._stop.set()

    def debug_info(self) -> dict:
        return {"containers": self._containers, "targets": len(self.exports["targets"])}
