"""Access to the Kubernetes API for pod discovery: credentials, list and watch.

Credentials come from `api_server` (+ bearer token / TLS settings), a kubeconfig file, or
the pod's service account (in-cluster). List and watch are plain HTTP GETs; a watch is a
stream of JSON lines `{"type": ADDED|MODIFIED|DELETED|ERROR, "object": ...}`.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.parse
from dataclasses import dataclass, field

import yaml

from ...errors import ConfigError
from .httpclient import HTTPError, connection_for, get_json

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class KubeClient:
    server: str
    token: str = ""
    token_file: str = ""
    context: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)
    namespace: str = "default"

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", **self.headers}
        token = self.token
        if self.token_file:
            try:
                with open(self.token_file) as f:
                    token = f.read().strip()   # re-read: projected tokens rotate
            except OSError as e:
                raise HTTPError(f"cannot read bearer token file {self.token_file}: {e.strerror}") from None
        if token:
            h["Authorization"] = f"Bearer {token}"
        return h

    def list(self, path: str, params: dict[str, str]) -> dict:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
        result = get_json(self.server, f"{path}?{query}" if query else path, self._headers(), context=self.context)
        if not isinstance(result, dict):
            raise HTTPError("the Kubernetes API answered with an unexpected shape")
        return result

    def watch(self, path: str, params: dict[str, str], timeout_s: float):
        """Yield watch events until the server ends the stream."""
        query = urllib.parse.urlencode({**{k: v for k, v in params.items() if v}, "watch": "1",
                                        "allowWatchBookmarks": "true",
                                        "timeoutSeconds": str(int(timeout_s))})
        conn, base = connection_for(self.server, timeout_s + 30, self.context)
        try:
            conn.request("GET", f"{base}{path}?{query}", headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise HTTPError(f"watch {path}: HTTP {resp.status}: {resp.read()[:200].decode(errors='replace')}")
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        except OSError as e:
            raise HTTPError(f"watch {path} on {self.server}: {e.strerror or e}") from None
        finally:
            conn.close()


def _tls_context(ca_file: str = "", ca_data: bytes = b"", insecure: bool = False, cert_file: str = "",
                 key_file: str = "") -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    if ca_data:
        ctx.load_verify_locations(cadata=ca_data.decode())
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx


def _data_file(data_b64: str, suffix: str) -> str:
    """kubeconfig *-data fields inlined as base64: ssl wants files for client certificates."""
    f = tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False)
    with f:
        f.write(base64.b64decode(data_b64))
    return f.name


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
    context = None
    if server.startswith("https://"):
        cert = rel(user.get("client-certificate", "")) or (
            _data_file(user["client-certificate-data"], ".crt") if user.get("client-certificate-data") else "")
        key = rel(user.get("client-key", "")) or (
            _data_file(user["client-key-data"], ".key") if user.get("client-key-data") else "")
        context = _tls_context(ca_file=rel(cluster.get("certificate-authority", "")),
                               ca_data=base64.b64decode(cluster.get("certificate-authority-data", "")),
                               insecure=bool(cluster.get("insecure-skip-tls-verify")), cert_file=cert, key_file=key)
    return KubeClient(server, token=user.get("token", ""), token_file=rel(user.get("tokenFile", "")),
                      context=context, namespace=ctx.get("namespace", "default"))


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
    return KubeClient(f"https://{host}:{port}", token_file=f"{SERVICE_ACCOUNT}/token",
                      context=_tls_context(ca_file=f"{SERVICE_ACCOUNT}/ca.crt"), namespace=namespace)
