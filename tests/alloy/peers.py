"""Protocol peers for the Alloy tests: a Connect-protocol Pyroscope server, a Docker Engine
API on a unix socket, a Kubernetes API (list + watch of pods). Each decodes or answers the
way the real server does, so the agent talks to them exactly as to the real thing."""

from __future__ import annotations

import gzip
import json
import os
import queue
import socket
import socketserver
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hotstack.export.push_pb2 import PushRequest
from hotstack.profile.pprof_pb2 import Profile


@dataclass
class ReceivedSeries:
    labels: dict[str, str]
    profile: Profile          # the decoded pprof
    gzipped: bool
    headers: dict[str, str]

    def functions(self) -> set[str]:
        strings = self.profile.string_table
        return {strings[f.name] for f in self.profile.function}

    def sample_type(self) -> tuple[str, str]:
        st = self.profile.sample_type[0]
        return self.profile.string_table[st.type], self.profile.string_table[st.unit]

    def total(self) -> int:
        return sum(s.value[0] for s in self.profile.sample)


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _LoopbackServer:
    """An HTTP server of a test on 127.0.0.1 (a free port unless given), served by a daemon thread
    until close()."""

    def _serve(self, handler, port: int = 0) -> int:
        """Starts serving with `handler`; returns the port."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self.httpd.server_address[1]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class PyroscopeServer(_LoopbackServer):
    """POST /push.v1.PusherService/Push (Connect unary, application/proto)."""

    def __init__(self) -> None:
        self.series: list[ReceivedSeries] = []
        self.errors: list[str] = []
        server = self

        class Handler(_Quiet):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/push.v1.PusherService/Push":
                    return self.reply(404, b'{"code":"unimplemented","message":"no such procedure"}')
                if self.headers.get("Content-Type") != "application/proto" or \
                        self.headers.get("Connect-Protocol-Version") != "1":
                    server.errors.append(f"bad headers: {dict(self.headers)}")
                    return self.reply(415, b'{"code":"invalid_argument","message":"bad content type"}')
                request = PushRequest()
                request.ParseFromString(body)
                for s in request.series:
                    for raw in s.samples:
                        data = raw.raw_profile
                        gz = data[:2] == b"\x1f\x8b"
                        prof = Profile()
                        prof.ParseFromString(gzip.decompress(data) if gz else data)
                        server.series.append(ReceivedSeries({lp.name: lp.value for lp in s.labels}, prof, gz,
                                                            dict(self.headers)))
                self.reply(200, b"", "application/proto")

        self.url = f"http://127.0.0.1:{self._serve(Handler)}"

    def wait_for(self, predicate, timeout: float = 60.0) -> list[ReceivedSeries]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [s for s in list(self.series) if predicate(s)]
            if found:
                return found
            time.sleep(0.2)
        return []


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)   # BaseHTTPRequestHandler wants a (host, port) address


class DockerServer:
    """GET /v1.xx/containers/json (with filters) and /v1.xx/networks, shaped like dockerd's answers."""

    def __init__(self, path: str, containers: list[dict], networks: list[dict], tls: "ssl.SSLContext | None" = None,
                 authorization: str = "", tcp: bool = False) -> None:
        """On a unix socket at `path`, or on 127.0.0.1 (`tcp`, or over TLS when `tls` is given;
        then `path` is unused and `url` says where); with `authorization`, other requests get 401."""
        self.path = path
        self.containers, self.networks = containers, networks
        self.requests: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.client_certs: list[dict] = []
        self.connections: list[socket.socket] = []
        server = self

        class Handler(_Quiet):
            def setup(self) -> None:
                super().setup()
                server.connections.append(self.connection)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                server.headers.append(dict(self.headers))
                if tls is not None:
                    server.client_certs.append(self.connection.getpeercert() or {})
                if authorization and self.headers.get("Authorization") != authorization:
                    return self.reply(401, b'{"message":"unauthorized"}')
                url = urllib.parse.urlsplit(self.path)
                route = url.path.split("/", 2)[-1] if url.path.startswith("/v1.") else url.path.lstrip("/")
                if route == "containers/json":
                    filters = json.loads(dict(urllib.parse.parse_qsl(url.query)).get("filters", "{}"))
                    found = [c for c in server.containers if _docker_filter(c, filters)]
                    return self.reply(200, json.dumps(found).encode())
                if route == "networks":
                    return self.reply(200, json.dumps(server.networks).encode())
                self.reply(404, b'{"message":"page not found"}')

        if tls is None and not tcp:
            self.httpd = _UnixHTTPServer(path, Handler)
            self.url = f"unix://{path}"
        else:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.httpd.daemon_threads = True
            if tls is not None:
                self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.url = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.tls, self.unix = tls, tls is None and not tcp
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        """As a daemon that stops: no new connection, and the kept-alive ones closed."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.unix:
            os.unlink(self.path)


def _docker_filter(container: dict, filters: dict) -> bool:
    for name, values in filters.items():
        if name == "label":
            labels = container.get("Labels") or {}
            ok = any((v.split("=", 1)[0] in labels and ("=" not in v or labels[v.split("=", 1)[0]] == v.split("=", 1)[1]))
                     for v in values)
        elif name == "name":
            ok = any(v.lstrip("/") in n.lstrip("/") for v in values for n in container.get("Names", []))
        elif name == "status":
            ok = container.get("State") in values
        else:
            ok = True
        if not ok:
            return False
    return True


def docker_container(cid: str, name: str, ip: str = "172.17.0.2", labels: dict | None = None,
                     ports: list[dict] | None = None) -> dict:
    """A container as GET /containers/json returns it."""
    return {
        "Id": cid, "Names": [f"/{name}"], "Image": "busybox", "ImageID": "sha256:" + "a" * 64,
        "Command": "/spin", "Created": int(time.time()) - 60, "Ports": ports or [], "Labels": labels or {},
        "State": "running", "Status": "Up 1 minute", "HostConfig": {"NetworkMode": "bridge"},
        "NetworkSettings": {"Networks": {"bridge": {
            "IPAMConfig": None, "Links": None, "Aliases": None, "NetworkID": "b" * 64, "EndpointID": "c" * 64,
            "Gateway": "172.17.0.1", "IPAddress": ip, "IPPrefixLen": 16, "MacAddress": "02:42:ac:11:00:02"}}},
        "Mounts": [],
    }


DOCKER_NETWORKS = [{"Name": "bridge", "Id": "b" * 64, "Created": "2026-01-01T00:00:00Z", "Scope": "local",
                    "Driver": "bridge", "EnableIPv6": False, "Internal": False, "Attachable": False,
                    "Ingress": False, "Labels": {}, "Options": {}}]


class KubernetesServer:
    """The core/v1 API's pods (/api/v1/pods, /api/v1/namespaces/NS/pods), nodes (/api/v1/nodes)
    and namespaces (/api/v1/namespaces), with fieldSelector / labelSelector, as a list (PodList,
    NodeList, NamespaceList) or a watch stream of events; `push_event` feeds the open watches.
    `port` fixes the port (to start the API after a client, as a cluster restarting does)."""

    def __init__(self, pods: list[dict], nodes: list[dict] | None = None, namespaces: list[dict] | None = None,
                 port: int = 0) -> None:
        key = lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
        self.objects = {"pods": {key(p): p for p in pods}, "nodes": {key(n): n for n in nodes or []},
                        "namespaces": {key(n): n for n in namespaces or []}}
        self.pods = self.objects["pods"]
        self.version = 100
        self.requests: list[str] = []
        self.authorization: list[str] = []
        self.watchers: list[tuple[str, queue.Queue]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                server.authorization.append(self.headers.get("Authorization", ""))
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                parts = url.path.strip("/").split("/")
                namespace = None
                if parts[:2] == ["api", "v1"] and parts[2:] in (["pods"], ["nodes"], ["namespaces"]):
                    resource = parts[2]
                elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
                    resource, namespace = "pods", parts[3]
                else:
                    return self.reply(404, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                       "reason": "NotFound", "code": 404}).encode())
                match = lambda o: _matches(o, resource, namespace, q)  # noqa: E731
                if q.get("watch") in ("1", "true"):
                    return self.watch(resource, match)
                with server.lock:
                    items = [o for o in server.objects[resource].values() if match(o)]
                    rv = str(server.version)
                kind = {"pods": "PodList", "nodes": "NodeList", "namespaces": "NamespaceList"}[resource]
                body = {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}
                self.reply(200, json.dumps(body).encode())

            def watch(self, resource: str, match) -> None:
                events: queue.Queue = queue.Queue()
                entry = (resource, events)
                with server.lock:
                    server.watchers.append(entry)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        event = events.get()
                        if event is None:
                            break
                        if not match(event["object"]):
                            continue
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                finally:
                    with server.lock:
                        server.watchers.remove(entry)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def push_event(self, kind: str, obj: dict, resource: str = "pods") -> None:
        with self.lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if kind == "DELETED":
                self.objects[resource].pop(key, None)
            else:
                self.objects[resource][key] = obj
            for r, w in self.watchers:
                if r == resource:
                    w.put({"type": kind, "object": obj})

    def close(self) -> None:
        with self.lock:
            for _, w in self.watchers:
                w.put(None)
        self.httpd.shutdown()
        self.httpd.server_close()


def _matches(obj: dict, resource: str, namespace: str | None, q: dict) -> bool:
    if resource == "pods":
        return _pod_matches(obj, namespace, q)
    for sel in filter(None, q.get("fieldSelector", "").split(",")):
        key, _, value = sel.partition("=")
        if {"metadata.name": obj["metadata"]["name"]}.get(key) != value.lstrip("="):
            return False
    return _labels_match(obj["metadata"], q)


def _pod_matches(pod: dict, namespace: str | None, q: dict) -> bool:
    if namespace and pod["metadata"]["namespace"] != namespace:
        return False
    for sel in filter(None, q.get("fieldSelector", "").split(",")):
        key, _, value = sel.partition("=")
        value = value.lstrip("=")
        actual = {"spec.nodeName": pod["spec"].get("nodeName", ""), "metadata.name": pod["metadata"]["name"],
                  "metadata.namespace": pod["metadata"]["namespace"],
                  "status.phase": pod["status"].get("phase", "")}.get(key)
        if actual != value:
            return False
    return _labels_match(pod["metadata"], q)


def _labels_match(metadata: dict, q: dict) -> bool:
    """Every `key=value` of the query's labelSelector is a label of the object."""
    for sel in filter(None, q.get("labelSelector", "").split(",")):
        key, _, value = sel.partition("=")
        if (metadata.get("labels") or {}).get(key) != value.lstrip("="):
            return False
    return True


def k8s_pod(name: str, namespace: str, node: str, container: str, container_id: str, phase: str = "Running",
            labels: dict | None = None, annotations: dict | None = None, ports: list[dict] | None = None) -> dict:
    """A pod as the API server returns it (the fields discovery reads, and a few more)."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                     "labels": labels or {}, "annotations": annotations or {},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs",
                                          "uid": "rs-uid", "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": container, "image": "busybox:1.36",
                                                    **({"ports": ports} if ports else {})}]},
        "status": {"phase": phase, "hostIP": "10.0.0.1", "podIP": "10.1.0.5",
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": container, "ready": True, "restartCount": 0,
                                          "image": "busybox:1.36", "containerID": container_id,
                                          "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    }


def k8s_node(name: str, internal_ip: str, labels: dict | None = None, annotations: dict | None = None,
             hostname: str = "") -> dict:
    """A node as the API server returns it."""
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"providerID": f"kind://docker/test/{name}", "podCIDR": "10.244.0.0/24"},
        "status": {"addresses": [{"type": "InternalIP", "address": internal_ip},
                                 {"type": "Hostname", "address": hostname or name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"containerRuntimeVersion": "containerd://1.7.0", "kubeletVersion": "v1.30.0"}},
    }


def k8s_namespace(name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    """A namespace as the API server returns it."""
    return {"metadata": {"name": name, "uid": f"uid-ns-{name}", "resourceVersion": "1",
                         "labels": {"kubernetes.io/metadata.name": name, **(labels or {})},
                         "annotations": annotations or {}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TestPKI:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by openssl."""
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str

    def server_context(self, require_client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.ca)
        return ctx


def make_pki(directory) -> TestPKI:
    import subprocess
    d = str(directory)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
        "-days", "1", "-subj", "/CN=hotstack test CA")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:docker.test"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr",
            "-subj", f"/CN=hotstack test {name}")
        with open(f"{d}/{name}.ext", "w") as f:
            f.write(ext + "\n")
        run("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
            "-CAcreateserial", "-out", f"{d}/{name}.pem", "-days", "1", "-extfile", f"{d}/{name}.ext")
    return TestPKI(f"{d}/ca.pem", f"{d}/server.pem", f"{d}/server.key", f"{d}/client.pem", f"{d}/client.key")


class HTTPProxy(_LoopbackServer):
    """A forward proxy on 127.0.0.1: absolute-form GETs and POSTs forwarded over plain HTTP, CONNECT
    tunnels relayed byte for byte; every request line (and Proxy-Authorization) recorded."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.proxy_authorization: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def forward(self, method: str) -> None:
                proxy.requests.append(f"{method} {self.path}")
                proxy.proxy_authorization.append(self.headers.get("Proxy-Authorization", ""))
                u = urllib.parse.urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))) if method == "POST" else None
                import http.client
                conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-authorization", "host")}
                conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body, headers=headers)
                resp = conn.getresponse()
                answer = resp.read()
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                conn.close()

            def do_GET(self) -> None:
                self.forward("GET")

            def do_POST(self) -> None:
                self.forward("POST")

            def do_CONNECT(self) -> None:
                proxy.requests.append(f"CONNECT {self.path}")
                proxy.proxy_authorization.append(self.headers.get("Proxy-Authorization", ""))
                host, _, port = self.path.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=10)
                self.send_response(200, "Connection established")
                self.end_headers()
                client = self.connection

                def pump(src, dst) -> None:
                    try:
                        while True:
                            data = src.recv(65536)
                            if not data:
                                break
                            dst.sendall(data)
                    except OSError:
                        pass
                    finally:
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                t = threading.Thread(target=pump, args=(upstream, client), daemon=True)
                t.start()
                pump(client, upstream)
                t.join(timeout=10)
                upstream.close()
                self.close_connection = True

        self.url = f"http://127.0.0.1:{self._serve(Handler)}"


class RedirectServer(_LoopbackServer):
    """Answers every GET and POST with `status` and a Location on `target` with the same path."""

    def __init__(self, target: str, status: int = 307) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                self.send_response(status)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.do_GET()

        self.url = f"127.0.0.1:{self._serve(Handler)}"


class OAuth2TokenServer(_LoopbackServer):
    """POST /token (client credentials grant, RFC 6749 4.4): the client authenticates with HTTP
    Basic; answers an access token valid `expires_in` seconds; records every form it got."""

    def __init__(self, client_id: str, client_secret: str, token: str, expires_in: int = 3600) -> None:
        self.forms: list[dict[str, str]] = []
        server = self
        expected = "Basic " + __import__("base64").b64encode(f"{client_id}:{client_secret}".encode()).decode()

        class Handler(_Quiet):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                form = dict(urllib.parse.parse_qsl(body))
                server.forms.append(form)
                if self.headers.get("Authorization") != expected or form.get("grant_type") != "client_credentials":
                    return self.reply(401, b'{"error":"invalid_client"}')
                self.reply(200, json.dumps({"access_token": token, "token_type": "Bearer",
                                            "expires_in": expires_in}).encode())

        self.url = f"http://127.0.0.1:{self._serve(Handler)}/token"


class H2PushServer:
    """A Connect push receiver on hypercorn (an HTTP/2 and HTTP/1.1 server: it picks by TLS ALPN,
    as Pyroscope's Go server does), recording each push's HTTP version, path and headers."""

    def __init__(self, pki: TestPKI, tls: bool = True) -> None:
        import asyncio

        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        self.requests: list[dict] = []
        server = self

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            server.requests.append({"http_version": scope["http_version"], "path": scope["path"],
                                    "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
                                    "request": PushRequest.FromString(body)})
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/proto"), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        if tls:
            config.certfile, config.keyfile = pki.server_cert, pki.server_key
            config.alpn_protocols = ["h2", "http/1.1"]
        config.accesslog = config.errorlog = None
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self._loop = asyncio.new_event_loop()
        self._stopped = asyncio.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(serve(app, config, shutdown_trigger=self._stopped.wait))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:   # listening
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)
