"""No secret is shown: a run of the agent with known secrets in every place a config holds one
(tokens, passwords, header values, a credentials file), profiles flowing and errors happening;
then every page, API answer, the metrics and the whole log are searched for them. The agent's
HTTP server is also tried as an attacker on the pod network would."""

from __future__ import annotations

import base64
import http.client
import socket
import time

import pytest

from ..conftest import hotstack
from .peers import DOCKER_NETWORKS, DockerServer, KubernetesServer, docker_container, k8s_node, k8s_pod

pytestmark = pytest.mark.root

SECRETS = {
    "bearer": "S3cr3t-bearer-7f1e", "header": "S3cr3t-header-9a2b", "password": "S3cr3t-password-4c3d",
    "file_token": "S3cr3t-filetoken-5e4f", "k8s": "S3cr3t-k8s-6a5b", "credentials": "S3cr3t-credfile-7c6d",
    "docker_password": "S3cr3t-dockerpw-8e7f", "docker_header": "S3cr3t-dockerhdr-9f80", "dead": "S3cr3t-dead-0a91",
    "oauth": "S3cr3t-oauth-1b2c", "write_oauth": "S3cr3t-writeoauth-2c3d", "proxy_header": "S3cr3t-proxyhdr-3d4e",
    "url_password": "S3cr3t-urlpw-4e5f", "dead_url_password": "S3cr3t-deadurl-5f60",
}


def _forms(secret: str) -> set[str]:
    """The secret and the encodings it may leak in (Basic auth base64, JSON escapes are the same)."""
    out = {secret}
    for user in ("u", "alice", "client"):
        out.add(base64.b64encode(f"{user}:{secret}".encode()).decode())
    return out


def _config(pyroscope_url: str, k8s_url: str, docker_sock: str, files: dict, spin_pid: int) -> str:
    return f'''
pyroscope.write "bearer" {{
  endpoint {{
    url          = "{pyroscope_url}"
    bearer_token = "{SECRETS["bearer"]}"
    headers      = {{"X-Scope-OrgID" = "{SECRETS["header"]}"}}
  }}
}}
pyroscope.write "basic" {{
  endpoint {{
    url = "{pyroscope_url}"
    basic_auth {{
      username = "u"
      password = "{SECRETS["password"]}"
    }}
  }}
}}
pyroscope.write "from_file" {{
  endpoint {{
    url               = "{pyroscope_url}"
    bearer_token_file = "{files["file_token"]}"
  }}
}}
pyroscope.write "in_url" {{
  endpoint {{
    url = "{pyroscope_url.replace("http://", "http://u:" + SECRETS["url_password"] + "@")}"
  }}
}}
pyroscope.write "dead" {{
  endpoint {{
    url                 = "http://u:{SECRETS["dead_url_password"]}@127.0.0.1:9"
    bearer_token        = "{SECRETS["dead"]}"
    max_backoff_retries = 1
    min_backoff_period  = "100ms"
    max_backoff_period  = "200ms"
  }}
}}
pyroscope.write "oauth" {{
  endpoint {{
    url                  = "{pyroscope_url}"
    max_backoff_retries  = 1
    min_backoff_period   = "100ms"
    proxy_url            = "http://127.0.0.1:9"
    proxy_connect_header = {{"Proxy-Token" = ["{SECRETS["proxy_header"]}"]}}
    oauth2 {{
      client_id     = "client"
      client_secret = "{SECRETS["write_oauth"]}"
      token_url     = "http://127.0.0.1:9/token"
    }}
  }}
}}
discovery.kubernetes "pods" {{
  role         = "pod"
  api_server   = "{k8s_url}"
  bearer_token = "{SECRETS["k8s"]}"
}}
discovery.kubernetes "nodes" {{
  role       = "node"
  api_server = "{k8s_url}"
  authorization {{
    type             = "Bearer"
    credentials_file = "{files["credentials"]}"
  }}
}}
discovery.kubernetes "oauth" {{
  role       = "node"
  api_server = "{k8s_url}"
  oauth2 {{
    client_id     = "client"
    client_secret = "{SECRETS["oauth"]}"
    token_url     = "http://127.0.0.1:9/token"
  }}
}}
discovery.docker "engine" {{
  host         = "unix://{docker_sock}"
  http_headers = {{"X-Docker-Token" = ["{SECRETS["docker_header"]}"]}}
  basic_auth {{
    username = "alice"
    password = "{SECRETS["docker_password"]}"
  }}
}}
pyroscope.ebpf "spin" {{
  targets          = [{{"__process_pid__" = "{spin_pid}", "service_name" = "spin"}}]
  forward_to       = [pyroscope.write.bearer.receiver, pyroscope.write.basic.receiver,
                      pyroscope.write.from_file.receiver, pyroscope.write.dead.receiver,
                      pyroscope.write.in_url.receiver,
                      pyroscope.write.oauth.receiver]
  collect_interval = "2s"
}}
'''


def test_no_secret_on_any_page_api_or_log(agent, pyroscope, spin_binary, workloads, tmp_path):
    files = {}
    for name in ("file_token", "credentials"):
        files[name] = tmp_path / name
        files[name].write_text(SECRETS[name] + "\n")
    k8s = KubernetesServer([k8s_pod("a", "ns1", "n1", "app", "containerd://" + "1" * 64)],
                           nodes=[k8s_node("n1", "10.0.0.1")])
    sock = tmp_path / "docker.sock"
    docker = DockerServer(str(sock), [docker_container("e" * 64, "web")], DOCKER_NETWORKS)
    spin = workloads([spin_binary])
    try:
        a = agent(_config(pyroscope.url, k8s.url, str(sock), files, spin.pid), extra=["--log.level", "debug"])
        a.wait_ready()
        # the secrets are used where they belong: by the receivers of the requests
        assert pyroscope.wait_for(lambda s: s.headers.get("Authorization") == f"Bearer {SECRETS['bearer']}"
                                  and s.headers.get("X-Scope-OrgID") == SECRETS["header"])
        assert pyroscope.wait_for(lambda s: s.headers.get("Authorization") == f"Bearer {SECRETS['file_token']}")
        # a password in the URL is sent as Basic credentials (as Go's client sends it), and never shown
        assert pyroscope.wait_for(lambda s: s.headers.get("Authorization") == "Basic " + base64.b64encode(
            f"u:{SECRETS['url_password']}".encode()).decode())
        assert f"Bearer {SECRETS['k8s']}" in k8s.authorization
        assert f"Bearer {SECRETS['credentials']}" in k8s.authorization
        assert docker.headers and docker.headers[0]["X-Docker-Token"] == SECRETS["docker_header"]
        time.sleep(3)   # a few failed pushes to the dead endpoint, the oauth2 failure logged

        pages = {path: a.get(path) for path in ("/", "/metrics", "/-/ready", "/-/healthy", "/flamegraph",
                                                "/api/v0/web/components", "/nope")}
        components = a.json("/api/v0/web/components")
        assert len(components) == 11
        for c in components:
            for path in (f"/api/v0/web/components/{c['id']}", f"/component/{c['id']}"):
                pages[path] = a.get(path)
        # secrets are shown as Alloy shows them
        bearer = a.json("/api/v0/web/components/pyroscope.write.bearer")["arguments"]["endpoint"][0]
        assert bearer["bearer_token"] == "(secret)" and bearer["headers"] == {"X-Scope-OrgID": "(secret)"}
        basic = a.json("/api/v0/web/components/pyroscope.write.basic")["arguments"]["endpoint"][0]["basic_auth"]
        assert basic == {"username": "u", "password": "(secret)", "password_file": ""}
        engine = a.json("/api/v0/web/components/discovery.docker.engine")["arguments"]
        assert engine["http_headers"] == {"X-Docker-Token": ["(secret)"]}
        assert engine["basic_auth"]["password"] == "(secret)"
        oauth = a.json("/api/v0/web/components/discovery.kubernetes.oauth")
        assert oauth["arguments"]["oauth2"]["client_secret"] == "(secret)"
        assert oauth["health"]["state"] == "unhealthy"   # its token URL does not answer: an error was made
        write = a.json("/api/v0/web/components/pyroscope.write.oauth")
        endpoint = write["arguments"]["endpoint"][0]
        assert endpoint["oauth2"]["client_secret"] == "(secret)"
        assert endpoint["proxy_connect_header"] == {"Proxy-Token": ["(secret)"]}
        assert write["health"]["state"] == "unhealthy", write["health"]   # the token request failed
        assert "(secret)" in pages["/component/pyroscope.write.bearer"][1]
        assert a.stop() == 0
        log = a.log.read_text()
        assert "dead" in log or "127.0.0.1:9" in log, log[-2000:]   # errors were logged
        for name, secret in SECRETS.items():
            for form in _forms(secret):
                for path, (_, body) in pages.items():
                    assert form not in body, f"secret {name} shown on {path}"
                assert form not in log, f"secret {name} in the agent's log"
    finally:
        k8s.close()
        docker.close()


def test_validate_and_errors_do_not_show_secrets(tmp_path):
    """--validate output, a config error next to a secret and a --debug run show no secret."""
    secret = SECRETS["bearer"]
    good = tmp_path / "good.alloy"
    good.write_text(f'pyroscope.write "w" {{\n  endpoint {{\n    url = "http://127.0.0.1:9"\n'
                    f'    bearer_token = "{secret}"\n    headers = {{"X-Key" = "{secret}"}}\n  }}\n}}\n')
    bad = tmp_path / "bad.alloy"
    bad.write_text(f'discovery.kubernetes "k" {{\n  role = "pod"\n  bearer_token = "{secret}"\n'
                   f'  bearer_token_file = "/nonexistent"\n  api_server = "{secret}"\n}}\n'
                   f'pyroscope.write "w" {{\n  endpoint {{\n    url = "http://x"\n    bearer_token = ["{secret}"]\n'
                   f'  }}\n}}\n')
    runs = [hotstack("agent", "--validate", str(good)), hotstack("agent", "--validate", str(bad)),
            hotstack("--debug", "agent", "--validate", str(bad))]
    assert runs[0].returncode == 0 and runs[1].returncode == 2
    assert "at most one of bearer_token and bearer_token_file" in runs[1].stderr
    assert "expected secret" in runs[1].stderr
    for r in runs:
        assert secret not in r.stdout + r.stderr, r.stderr


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                return b"".join(chunks)
            chunks.append(data)


def test_http_server_as_an_attacker_sees_it(agent, tmp_path):
    """Only GET; no path reaches a file; bounded query values; every answer with the headers
    that stop sniffing and framing; idle connections are dropped."""
    a = agent('discovery.relabel "r" {\n  targets = [{"a" = "<script>alert(1)</script>"}]\n}\n',
              )
    a.wait_ready()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
        conn.request(method, "/api/v0/web/components", body=b"x" * 10)
        resp = conn.getresponse()
        assert resp.status == 405 and resp.getheader("Allow") == "GET", (method, resp.status)
        conn.close()
    for path in ("/../../../../etc/passwd", "/component/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                 "/api/v0/web/components/..%2f..%2fetc%2fpasswd", "//etc/passwd", "/flamegraph?format=/etc/passwd"):
        status, body = a.get(path)
        assert "root:x:0:0" not in body and status in (400, 404), (path, status)
    for query in ("minutes=nan", "minutes=inf", "minutes=-1", "minutes=1e400", "service_name=" + "x" * 5000):
        assert a.get(f"/flamegraph?{query}")[0] in (400, 404), query
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    conn.request("GET", "/component/discovery.relabel.r")
    resp = conn.getresponse()
    page = resp.read().decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert resp.getheader("X-Content-Type-Options") == "nosniff" and resp.getheader("X-Frame-Options") == "DENY"
    assert "default-src 'none'" in resp.getheader("Content-Security-Policy")
    conn.close()
    # a request line far too long is refused, and the server still serves afterwards
    assert _raw(a.port, b"GET /" + b"a" * 70000 + b" HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 414")
    assert a.get("/-/ready")[0] == 200


def test_http_server_bounds_idle_and_excess_connections(monkeypatch):
    """Connections beyond the limit are closed at once; a client that connects and sends
    nothing is dropped after the socket timeout, and the server serves again."""
    from hotstack.alloy import server
    from hotstack.alloy.controller import load_config
    monkeypatch.setattr(server, "SOCKET_TIMEOUT_S", 1)
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 3)
    s = server.AgentServer(load_config('discovery.relabel "r" {\n  targets = []\n}\n', "t.alloy"), "127.0.0.1:0")
    s.start()
    port = int(s.address.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        time.sleep(0.3)
        started = time.monotonic()
        assert _raw(port, b"GET /-/healthy HTTP/1.0\r\n\r\n") == b""   # over the limit: closed unanswered
        assert time.monotonic() - started < 1
        for sock in idle:   # each idle client is dropped after the timeout
            assert sock.recv(1) == b""
        assert time.monotonic() - started < 5
        time.sleep(0.2)
        assert _raw(port, b"GET /-/healthy HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200")
    finally:
        for sock in idle:
            sock.close()
        s.stop()


def test_passwords_in_urls_are_redacted(tmp_path):
    """A URL with a password (scheme://user:password@host) is shown as Go's url.Redacted()
    shows it, in the arguments and in the error that names it."""
    from hotstack.alloy.controller import load_config
    secret = "S3cr3t-inurl-2d3e"
    c = load_config(f'discovery.docker "d" {{\n  host = "http://admin:{secret}@127.0.0.1:9"\n}}\n', "t.alloy")
    c.start()
    try:
        page = str(c.component("discovery.docker.d").describe())
        assert secret not in page and "admin:xxxxx@127.0.0.1:9" in page
        assert "cannot reach http://admin:xxxxx@127.0.0.1:9" in c.component("discovery.docker.d").health.message
    finally:
        c.stop()


@pytest.fixture
def pod_network():
    """A client on another host, as one on the pod network: a network namespace of the test's own,
    joined to this one by a veth pair with link-local addresses (no traffic leaves the machine).
    Yields (the agent's address here, a function running Python code in the namespace)."""
    import os
    import subprocess
    import sys

    import shutil
    assert shutil.which("ip"), "the pod-network test needs ip(8): apt-get install iproute2"
    tag = f"{os.getpid() % 100000}"
    ns, here, there = f"hs-pod-{tag}", f"hsp{tag}a", f"hsp{tag}b"

    def ip(*args: str, netns: str = "") -> None:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=30)

    ip("netns", "add", ns)
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("addr", "add", "169.254.77.1/30", "dev", here)
        ip("link", "set", here, "up")
        ip("addr", "add", "169.254.77.2/30", "dev", there, netns=ns)
        ip("link", "set", there, "up", netns=ns)

        def run_there(code: str) -> str:
            r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout

        yield "169.254.77.1", run_there
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_reload_is_not_served_to_the_pod_network(agent, pod_network):
    """/-/reload, the one route that acts (it re-reads the config file and applies it), answers a
    client from another address with 403 and does nothing; the read-only pages still answer it;
    from the host itself it reloads as Alloy's does."""
    address, run_there = pod_network
    a = agent('discovery.relabel "r" {\n  targets = []\n}\n', listen_host="0.0.0.0")   # as the DaemonSet
    a.wait_ready()
    code = ("import http.client\n"
            "for method, path in (('GET', '/-/reload'), ('POST', '/-/reload'), ('GET', '/-/ready')):\n"
            f"    c = http.client.HTTPConnection('{address}', {a.port}, timeout=10)\n"
            "    c.request(method, path)\n"
            "    r = c.getresponse()\n"
            "    print(method, path, r.status, r.read().decode().strip())\n")
    out = run_there(code).splitlines()
    assert out[0].startswith("GET /-/reload 403 /-/reload is served to local clients only"), out
    assert out[1].startswith("POST /-/reload 403"), out
    assert out[2] == "GET /-/ready 200 Agent is ready.", out
    assert "config reloaded" not in a.log.read_text()
    status, body = a.get("/-/reload")     # from this host (loopback): Alloy's behaviour
    assert status == 200, body
