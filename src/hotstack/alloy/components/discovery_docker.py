"""discovery.docker: containers of a Docker Engine, listed over its API (unix socket, HTTP or
HTTPS with Alloy's HTTP client settings: tls_config, basic_auth, bearer_token, ...).

An engine that does not answer yet (a DaemonSet may start before it) makes the component
unhealthy, and the list is retried with backoff until it answers."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse

from ..component import Component, register
from ..schema import BOOL, DURATION, INT, STRING, Arg, BlockArg, ListOf, Schema
from .httpclient import HTTP_CLIENT, HTTPClientConfig, HTTPError, get_json, validate_http_client

_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
API = "/v1.41"
MAX_BACKOFF_S = 30.0   # a version every Docker Engine since 20.10 serves


def sanitize(name: str) -> str:
    return _INVALID_LABEL_CHARS.sub("_", name)


def _validate(args: dict) -> None:
    host = args["host"]
    if not re.match(r"^(unix|tcp|http|https)://", host):
        raise ValueError(f"host {host!r} must be a unix://, tcp://, http:// or https:// URL")
    validate_http_client(args)


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
        *HTTP_CLIENT,
    ], validate=_validate)
    initial_exports = {"targets": []}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._containers = 0

    def update(self, args: dict) -> None:
        self.args = args
        self._http = HTTPClientConfig(args)   # one per configuration: it keeps an oauth2 token until expiry

    def _url(self) -> str:
        host, tls = self.args["host"], self.args["tls_config"]
        if host.startswith("tcp://"):   # as the Docker client: TLS when TLS settings are given
            uses_tls = any(tls[k] for k in ("ca_file", "ca_pem", "cert_file", "cert_pem", "insecure_skip_verify"))
            return ("https://" if uses_tls else "http://") + host[len("tcp://"):]
        return host

    def filters_query(self) -> str:
        """The `filter` blocks as the Engine API's `filters` query (name -> values), or ''."""
        filters: dict[str, list[str]] = {}
        for f in self.args["filter"]:
            filters.setdefault(f["name"], []).extend(f["values"])
        return "?" + urllib.parse.urlencode({"filters": json.dumps(filters)}) if filters else ""

    def refresh(self) -> None:
        query = self.filters_query()
        containers = get_json(self._url(), f"{API}/containers/json{query}", client=self._http)
        networks = get_json(self._url(), f"{API}/networks", client=self._http)
        if not isinstance(containers, list) or not isinstance(networks, list):
            raise HTTPError("the Docker API answered with an unexpected shape")
        self._containers = len(containers)
        self.publish(targets=targets_from(containers, networks, self.args["port"],
                                          self.args["match_first_network"], self.args["host_networking_host"]))
        self.set_health("healthy", f"{self._containers} containers")

    def start(self) -> None:
        """List once now; an engine that does not answer is retried in the background."""
        try:
            self.refresh()
            delay = self.args["refresh_interval"]
        except HTTPError as e:
            self._unreachable(e)
            delay = 1.0
        self._thread = threading.Thread(target=self._loop, args=(delay,), name=f"hotstack-{self.id}", daemon=True)
        self._thread.start()

    def _unreachable(self, e: HTTPError) -> None:
        self.set_health("unhealthy", f"{e} (is the Docker daemon running and its socket mounted? retrying)")

    def _loop(self, delay: float) -> None:
        """Every refresh_interval; after a failure, sooner: 1 s doubling up to refresh_interval."""
        backoff = 1.0
        while not self._stop.wait(delay):
            try:
                self.refresh()
                backoff, delay = 1.0, self.args["refresh_interval"]
            except HTTPError as e:
                self._unreachable(e)
                delay = min(backoff, self.args["refresh_interval"])
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def stop(self) -> None:
        self._stop.set()

    def debug_info(self) -> dict:
        return {"containers": self._containers, "targets": len(self.exports["targets"])}
