"""Access to the Kubernetes API for pod discovery: credentials, list and watch.

Credentials come from `api_server` (+ bearer token / TLS settings), a kubeconfig file, or
the pod's service account (in-cluster). List and watch are plain HTTP GETs; a watch is a
stream of JSON lines `{"type": ADDED|MODIFIED|DELETED|ERROR, "object": ...}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from typing import Callable
import urllib.parse
from dataclasses import dataclass, field

import httpx
import yaml

from ...errors import ConfigError
from ...export.http_transport import describe
from ..schema import Schema
from ..secret import Secret, redact_url
from .httpclient import HTTP_CLIENT, TLS_CONFIG, HTTPClientConfig, HTTPError, get_json, transport_for

MAX_EVENT = 64 << 20   # one watch event (a JSON line) larger than this is refused
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def client_args(**given) -> dict:
    """HTTP client settings with every default filled in (as a decoded block has them)."""
    args = Schema(HTTP_CLIENT).defaults()
    tls = given.pop("tls_config", {})
    args.update(given)
    args["tls_config"] = {**TLS_CONFIG.defaults(), **tls}
    return args


@dataclass
class KubeClient:
    server: str
    http: HTTPClientConfig = field(default_factory=lambda: HTTPClientConfig(client_args()))
    namespace: str = "default"

    def _headers(self) -> dict[str, str]:
        # credentials are read at each request: projected service-account tokens rotate
        return {"Accept": "application/json", **self.http.headers()}

    def list(self, path: str, params: dict[str, str]) -> dict:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
        result = get_json(self.server, f"{path}?{query}" if query else path, self._headers(), client=self.http)
        if not isinstance(result, dict):
            raise HTTPError("the Kubernetes API answered with an unexpected shape")
        return result

    def get(self, path: str) -> dict:
        result = get_json(self.server, path, self._headers(), client=self.http)
        if not isinstance(result, dict):
            raise HTTPError("the Kubernetes API answered with an unexpected shape")
        return result

    def watch(self, path: str, params: dict[str, str], timeout_s: float):
        """Yield watch events until the server ends the stream."""
        query = urllib.parse.urlencode({**{k: v for k, v in params.items() if v}, "watch": "1",
                                        "allowWatchBookmarks": "true",
                                        "timeoutSeconds": str(int(timeout_s))})
        transport, base = transport_for(self.server, timeout_s + 30, self.http)
        try:
            with transport.stream("GET", f"{base}{path}?{query}", self._headers(),
                                  sni_hostname=self.http.server_name()) as resp:
                if resp.status_code != 200:
                    raise HTTPError(f"watch {path}: HTTP {resp.status_code}: "
                                    f"{resp.read()[:200].decode(errors='replace')}")
                pending = b""
                for chunk in resp.iter_bytes():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    if len(pending) > MAX_EVENT:
                        raise HTTPError(f"watch {path}: an event larger than {MAX_EVENT >> 20} MiB")
                    for line in lines:
                        if line.strip():
                            yield json.loads(line)
                if pending.strip():
                    yield json.loads(pending)
        except httpx.HTTPError as e:
            raise HTTPError(f"watch {path} on {redact_url(self.server)}: {describe(e)}") from None


WATCH_TIMEOUT_S = 300
MAX_BACKOFF_S = 30.0


def object_key(obj: dict) -> tuple[str, str]:
    m = obj.get("metadata") or {}
    return m.get("namespace", ""), m.get("name", "")


class ResourceWatch:
    """One list+watch of a resource path, kept current in `objects`, as client-go's informer:
    list, then watch from the list's resourceVersion; on any error (API unreachable, 410
    Gone) report it and list again after a backoff (1 s doubling to 30 s), forever."""

    def __init__(self, client: KubeClient, path: str, params: Callable[[], dict[str, str]],
                 on_change: Callable[[], None], on_status: Callable[["ResourceWatch"], None]) -> None:
        self.client, self.path, self.params = client, path, params
        self.on_change, self.on_status = on_change, on_status
        self.objects: dict[tuple[str, str], dict] = {}
        self.lock = threading.Lock()
        self.error = ""        # the last failure, '' once a list succeeded
        self.synced = False
        self._version = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"hotstack-watch{path}", daemon=True)

    def start(self) -> None:
        """List once now (so that targets exist when start returns), then watch in a thread;
        an unreachable API is reported (on_status) and retried there."""
        try:
            self._version = self.list()
        except (HTTPError, ValueError) as e:
            self.error = str(e)
            self.on_status(self)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> list[dict]:
        with self.lock:
            return [o for _, o in sorted(self.objects.items())]

    def list(self) -> str:
        result = self.client.list(self.path, self.params())
        with self.lock:
            self.objects = {object_key(o): o for o in result.get("items") or []}
        self.synced, self.error = True, ""
        self.on_change()
        self.on_status(self)
        return (result.get("metadata") or {}).get("resourceVersion", "")

    def _loop(self) -> None:
        backoff, version = 1.0, self._version
        if self.error and self._stop.wait(backoff):
            return
        while not self._stop.is_set():
            try:
                if not version:
                    version = self.list()
                    backoff = 1.0
                for event in self.client.watch(self.path, {**self.params(), "resourceVersion": version},
                                               WATCH_TIMEOUT_S):
                    if self._stop.is_set():
                        return
                    version = self._apply(event, version)
                    if not version:
                        break
            except (HTTPError, ValueError) as e:
                self.error, version = str(e), ""
                self.on_status(self)
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _apply(self, event: dict, version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return ""   # e.g. 410 Gone: list again
        version = (obj.get("metadata") or {}).get("resourceVersion", version)
        if kind == "BOOKMARK":
            return version
        with self.lock:
            if kind == "DELETED":
                self.objects.pop(object_key(obj), None)
            else:
                self.objects[object_key(obj)] = obj
        self.on_change()
        return version


def _b64(value: str, what: str, path: str) -> str:
    try:
        return base64.b64decode(value).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConfigError(f"kubeconfig {path}: {what} is not base64 PEM") from None


def from_kubeconfig(path: str) -> KubeClient:
    try:
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"cannot read kubeconfig {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    by_name = lambda kind: {i["name"]: i.get(kind[:-1], {}) for i in cfg.get(kind) or []}  # noqa: E731
    contexts, clusters, users = by_name("contexts"), by_name("clusters"), by_name("users")
    current = cfg.get("current-context") or next(iter(contexts), "")
    if current not in contexts:
        raise ConfigError(f"kubeconfig {path}: context {current!r} not found")
    ctx = contexts[current]
    cluster, user = clusters.get(ctx.get("cluster"), {}), users.get(ctx.get("user"), {})
    server = cluster.get("server", "")
    if not server:
        raise ConfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    base = os.path.dirname(os.path.abspath(path))
    rel = lambda p: p if not p or os.path.isabs(p) else os.path.join(base, p)  # noqa: E731
    tls = {"ca_file": rel(cluster.get("certificate-authority", "")),
           "insecure_skip_verify": bool(cluster.get("insecure-skip-tls-verify")),
           "cert_file": rel(user.get("client-certificate", "")), "key_file": rel(user.get("client-key", ""))}
    if cluster.get("certificate-authority-data"):
        tls["ca_pem"] = _b64(cluster["certificate-authority-data"], "certificate-authority-data", path)
    if user.get("client-certificate-data"):   # inline PEMs stay in memory (httpclient loads them)
        tls["cert_pem"] = _b64(user["client-certificate-data"], "client-certificate-data", path)
    if user.get("client-key-data"):
        tls["key_pem"] = Secret(_b64(user["client-key-data"], "client-key-data", path))
    http = client_args(bearer_token=Secret(user.get("token", "")), bearer_token_file=rel(user.get("tokenFile", "")),
                       tls_config=tls)
    if user.get("username"):
        http["basic_auth"] = {"username": user["username"], "password": Secret(user.get("password", "")),
                              "password_file": ""}
    return KubeClient(server, HTTPClientConfig(http), namespace=ctx.get("namespace", "default"))


def in_cluster() -> KubeClient:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("discovery.kubernetes: not running in a cluster (KUBERNETES_SERVICE_HOST is unset): "
                          "set api_server or kubeconfig_file")
    try:
        with open(f"{SERVICE_ACCOUNT}/namespace") as f:
            namespace = f.read().strip()
    except OSError:
        namespace = "default"
    host = f"[{host}]" if ":" in host else host
    http = client_args(bearer_token_file=f"{SERVICE_ACCOUNT}/token", tls_config={"ca_file": f"{SERVICE_ACCOUNT}/ca.crt"})
    return KubeClient(f"https://{host}:{port}", HTTPClientConfig(http), namespace=namespace)
