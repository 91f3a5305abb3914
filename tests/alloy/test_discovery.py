"""discovery.process against the real /proc, discovery.docker against a Docker Engine API on a
unix socket, discovery.kubernetes against a Kubernetes API (list + watch): labels and updates."""

from __future__ import annotations

import os
import subprocess
import sys

from hotstack.alloy.components.discovery_process import join
from hotstack.alloy.controller import load_config

from ..conftest import wait_for
from .conftest import running
from .peers import DOCKER_NETWORKS, DockerServer, KubernetesServer, docker_container, k8s_pod


def test_process_discovery_reads_proc(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"], cwd=tmp_path)
    try:
        with running('discovery.process "p" {\n  discover_config {\n    username = true\n    uid = true\n'
                     '    cgroup_path = true\n  }\n}\n') as c:
            targets = c.component("discovery.process.p").exports["targets"]
            mine = [t for t in targets if t["__process_pid__"] == str(p.pid)]
            assert len(mine) == 1
            t = mine[0]
            assert t["__meta_process_exe"] == os.path.realpath(sys.executable)
            assert t["__meta_process_cwd"] == str(tmp_path)
            assert t["__meta_process_commandline"].endswith("import time; time.sleep(60) marker-arg")
            assert t["__meta_process_uid"] == str(os.getuid())
            assert t["__meta_process_username"] == __import__("pwd").getpwuid(os.getuid()).pw_name
            assert "__meta_process_cgroup_path" in t
            assert not any(k.startswith("__meta_process_pid") for k in t)
            assert str(os.getpid()) in {t["__process_pid__"] for t in targets}
        # defaults: no username/uid labels
        c = load_config('discovery.process "p" {}\n', "t.alloy")
        c.start()
        try:
            t = next(t for t in c.component("discovery.process.p").exports["targets"]
                     if t["__process_pid__"] == str(p.pid))
            assert "__meta_process_uid" not in t and "__meta_process_username" not in t
        finally:
            c.stop()
    finally:
        p.kill()
        p.wait()


def test_process_join_by_container_id():
    cid = "a" * 64
    procs = [{"__process_pid__": "1", "__container_id__": cid}, {"__process_pid__": "2"}]
    external = [{"__meta_kubernetes_pod_container_id": f"containerd://{cid}", "pod": "p"},
                {"__meta_kubernetes_pod_container_id": "other://" + "b" * 64, "pod": "q"}, {"x": "y"}]
    out = join(procs, external)
    assert {"__process_pid__": "1", "__container_id__": cid,
            "__meta_kubernetes_pod_container_id": f"containerd://{cid}", "pod": "p"} in out
    assert {"__process_pid__": "2"} in out
    assert {"x": "y"} in out
    assert external[0] in out   # targets with a container id are also kept as they are
    assert external[1] in out


def healthy_targets(comp) -> list[dict]:
    """A discovery component's targets, once it is checked healthy."""
    assert comp.health.state == "healthy", comp.health
    return comp.exports["targets"]


def healthy_names(comp) -> list[str]:
    """The container names of a discovery.docker's targets, once it is checked healthy."""
    return [t["__meta_docker_container_name"] for t in healthy_targets(comp)]


def test_docker_discovery_labels_ports_and_filters(tmp_path):
    cid = "c" * 64
    containers = [docker_container(cid, "web", labels={"com.docker.compose.service": "web"},
                                   ports=[{"PrivatePort": 8080, "PublicPort": 80, "IP": "0.0.0.0", "Type": "tcp"},
                                          {"PrivatePort": 9090, "Type": "tcp"}, {"PrivatePort": 53, "Type": "udp"}]),
                  docker_container("d" * 64, "db", ip="172.17.0.3", labels={"tier": "db"})]
    server = DockerServer(str(tmp_path / "d.sock"), containers, DOCKER_NETWORKS)
    try:
        with running(f'discovery.docker "d" {{\n  host = "unix://{tmp_path}/d.sock"\n  refresh_interval = "200ms"\n'
                     f'  filter {{\n    name = "label"\n    values = ["com.docker.compose.service"]\n  }}\n}}\n') as c:
            comp = c.component("discovery.docker.d")
            targets = comp.exports["targets"]
            assert len(targets) == 2, targets   # the db container is filtered out; udp port skipped
            by_port = {t["__meta_docker_port_private"]: t for t in targets}
            t = by_port["8080"]
            assert t["__meta_docker_container_id"] == cid and t["__meta_docker_container_name"] == "/web"
            assert t["__meta_docker_port_public"] == "80" and t["__meta_docker_port_public_ip"] == "0.0.0.0"
            assert t["__address__"] == "172.17.0.2:8080"
            assert t["__meta_docker_network_name"] == "bridge" and t["__meta_docker_network_scope"] == "local"
            assert t["__meta_docker_container_label_com_docker_compose_service"] == "web"
            assert t["__meta_docker_container_network_mode"] == "bridge"
            assert "__meta_docker_port_public" not in by_port["9090"]
            assert any("filters=" in r and "com.docker.compose.service" in r for r in server.requests)
            # the daemon goes away at run time: unhealthy, with the reason, last targets kept
            server.close()
            server = None
            assert wait_for(lambda: comp.health.state == "unhealthy")
            assert "cannot reach unix://" in comp.health.message
            assert len(comp.exports["targets"]) == 2
    finally:
        if server is not None:
            server.close()


def test_kubernetes_list_and_watch(tmp_path):
    pods = [k8s_pod("a", "ns1", "n1", "app", "containerd://" + "1" * 64, labels={"app.kubernetes.io/name": "x"},
                    annotations={"pyroscope.io/service_name": "svc-a"},
                    ports=[{"name": "http", "containerPort": 8080, "protocol": "TCP"}]),
            k8s_pod("b", "ns2", "n1", "app", "cri-o://" + "2" * 64)]
    k8s = KubernetesServer(pods)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {{cluster: c, user: u, namespace: ns1}}
clusters:
- name: c
  cluster: {{server: "{k8s.url}"}}
users:
- name: u
  user: {{tokenFile: {token}}}
""")
    try:
        with running(f'discovery.kubernetes "k" {{\n  role = "pod"\n  kubeconfig_file = "{kubeconfig}"\n'
                     f'  namespaces {{\n    own_namespace = true\n  }}\n}}\n') as c:
            comp = c.component("discovery.kubernetes.k")
            targets = comp.exports["targets"]
            assert len(targets) == 1   # only ns1 (own namespace from the kubeconfig context)
            t = targets[0]
            assert t["__meta_kubernetes_pod_annotation_pyroscope_io_service_name"] == "svc-a"
            assert t["__meta_kubernetes_pod_annotationpresent_pyroscope_io_service_name"] == "true"
            assert t["__meta_kubernetes_pod_label_app_kubernetes_io_name"] == "x"
            assert t["__meta_kubernetes_pod_container_id"] == "containerd://" + "1" * 64
            assert t["__meta_kubernetes_pod_container_port_name"] == "http"
            assert t["__address__"] == "10.1.0.5:8080"
            assert (t["__meta_kubernetes_pod_controller_kind"], t["__meta_kubernetes_pod_ready"]) == ("ReplicaSet", "true")
            assert any(r.startswith("/api/v1/namespaces/ns1/pods") for r in k8s.requests)
            assert k8s.authorization[0] == "Bearer s3cret"
            # watch: modified, added, deleted
            wait_for(lambda: k8s.watchers)
            modified = k8s_pod("a", "ns1", "n1", "app", "containerd://" + "1" * 64, phase="Succeeded")
            k8s.push_event("MODIFIED", modified)
            assert wait_for(lambda: comp.exports["targets"] and
                            comp.exports["targets"][0]["__meta_kubernetes_pod_phase"] == "Succeeded")
            k8s.push_event("ADDED", k8s_pod("c", "ns1", "n2", "side", "containerd://" + "3" * 64))
            assert wait_for(lambda: len(comp.exports["targets"]) == 2)
            k8s.push_event("DELETED", modified)
            assert wait_for(lambda: [t["__meta_kubernetes_pod_name"] for t in comp.exports["targets"]] == ["c"])
    finally:
        k8s.close()


def test_docker_discovery_over_tls_with_client_certificate_and_basic_auth(tmp_path):
    """Alloy's HTTP client blocks on discovery.docker: tcp:// with tls_config (CA, client
    certificate: mTLS) and basic_auth with a password_file; the engine refuses anything else."""
    import base64

    from .peers import make_pki
    pki = make_pki(tmp_path)
    password = tmp_path / "password"
    password.write_text("docker-pass\n")
    expected = "Basic " + base64.b64encode(b"alice:docker-pass").decode()
    server = DockerServer("", [docker_container("e" * 64, "tls-web")], DOCKER_NETWORKS,
                          tls=pki.server_context(), authorization=expected)
    try:
        with running(f'discovery.docker "d" {{\n  host = "tcp://{server.url}"\n'
                     f'  basic_auth {{\n    username = "alice"\n    password_file = "{password}"\n  }}\n'
                     f'  http_headers = {{"X-Test" = ["one", "two"]}}\n'
                     f'  tls_config {{\n    ca_file = "{pki.ca}"\n    cert_file = "{pki.client_cert}"\n'
                     f'    key_file = "{pki.client_key}"\n    min_version = "TLS12"\n  }}\n}}\n') as c:
            assert healthy_names(c.component("discovery.docker.d")) == ["/tls-web"]
            assert server.headers[0]["Authorization"] == expected and server.headers[0]["X-Test"] == "one, two"
            subject = dict(x[0] for x in server.client_certs[0]["subject"])
            assert subject["commonName"] == "hotstack test client"
        # without the client certificate the TLS handshake fails: unhealthy, with the reason
        with running(f'discovery.docker "d" {{\n  host = "tcp://{server.url}"\n'
                     f'  tls_config {{\n    ca_file = "{pki.ca}"\n  }}\n}}\n') as c:
            comp = c.component("discovery.docker.d")
            assert comp.health.state == "unhealthy" and "cannot reach https://127.0.0.1:" in comp.health.message
        # server_name: the certificate names docker.test, not the host we dial by IP... both are in it
        with running(f'discovery.docker "d" {{\n  host = "tcp://{server.url}"\n  bearer_token = "wrong"\n'
                     f'  tls_config {{\n    ca_file = "{pki.ca}"\n    cert_file = "{pki.client_cert}"\n'
                     f'    key_file = "{pki.client_key}"\n    server_name = "docker.test"\n  }}\n}}\n') as c:
            comp = c.component("discovery.docker.d")
            assert comp.health.state == "unhealthy" and "HTTP 401" in comp.health.message
            assert server.headers[-1]["Authorization"] == "Bearer wrong"
    finally:
        server.close()


def test_kubernetes_node_role(tmp_path):
    from .peers import k8s_node
    k8s = KubernetesServer([], nodes=[k8s_node("n1", "10.0.0.1", labels={"topology.kubernetes.io/zone": "z1"},
                                               annotations={"node.alpha.kubernetes.io/ttl": "0"}),
                                      k8s_node("n2", "10.0.0.2")])
    try:
        with running(f'discovery.kubernetes "n" {{\n  role = "node"\n  api_server = "{k8s.url}"\n'
                     f'  selectors {{\n    role = "node"\n'
                     f'    label = "topology.kubernetes.io/zone=z1"\n  }}\n}}\n') as c:
            comp = c.component("discovery.kubernetes.n")
            targets = healthy_targets(comp)
            assert len(targets) == 1, targets   # the label selector keeps n1 only
            t = targets[0]
            assert t == {"__meta_kubernetes_node_name": "n1", "instance": "n1", "__address__": "10.0.0.1:10250",
                         "__meta_kubernetes_node_label_topology_kubernetes_io_zone": "z1",
                         "__meta_kubernetes_node_labelpresent_topology_kubernetes_io_zone": "true",
                         "__meta_kubernetes_node_annotation_node_alpha_kubernetes_io_ttl": "0",
                         "__meta_kubernetes_node_annotationpresent_node_alpha_kubernetes_io_ttl": "true",
                         "__meta_kubernetes_node_provider_id": "kind://docker/test/n1",
                         "__meta_kubernetes_node_address_InternalIP": "10.0.0.1",
                         "__meta_kubernetes_node_address_Hostname": "n1"}
            assert any(r.startswith("/api/v1/nodes?labelSelector=topology.kubernetes.io") for r in k8s.requests)
            wait_for(lambda: k8s.watchers)
            k8s.push_event("ADDED", k8s_node("n3", "10.0.0.3", labels={"topology.kubernetes.io/zone": "z1"}),
                           resource="nodes")
            assert wait_for(lambda: {t["instance"] for t in comp.exports["targets"]} == {"n1", "n3"})
    finally:
        k8s.close()


def test_kubernetes_attach_metadata_namespace_and_node(tmp_path):
    """Pod targets carry their namespace's and their node's labels, kept current by watches;
    a node selector scopes the pods to one node."""
    from .peers import k8s_namespace, k8s_node
    pods = [k8s_pod("a", "shop", "n1", "app", "containerd://" + "1" * 64),
            k8s_pod("b", "shop", "n2", "app", "containerd://" + "2" * 64)]
    k8s = KubernetesServer(pods, nodes=[k8s_node("n1", "10.0.0.1", labels={"pool": "gpu"}),
                                        k8s_node("n2", "10.0.0.2", labels={"pool": "cpu"})],
                           namespaces=[k8s_namespace("shop", labels={"team": "payments"},
                                                     annotations={"owner": "alice@example.com"})])
    try:
        with running(f'discovery.kubernetes "k" {{\n  role = "pod"\n  api_server = "{k8s.url}"\n'
                     f'  selectors {{\n    role = "pod"\n    field = "spec.nodeName=n1"\n  }}\n'
                     f'  attach_metadata {{\n    namespace = true\n    node = true\n  }}\n}}\n') as c:
            comp = c.component("discovery.kubernetes.k")
            targets = healthy_targets(comp)
            assert [t["__meta_kubernetes_pod_name"] for t in targets] == ["a"]   # pods of node n1 only
            t = targets[0]
            assert t["__meta_kubernetes_namespace_label_team"] == "payments"
            assert t["__meta_kubernetes_namespace_labelpresent_team"] == "true"
            assert t["__meta_kubernetes_namespace_label_kubernetes_io_metadata_name"] == "shop"
            assert t["__meta_kubernetes_namespace_annotation_owner"] == "alice@example.com"
            assert t["__meta_kubernetes_node_name"] == "n1" and t["__meta_kubernetes_node_label_pool"] == "gpu"
            assert t["__meta_kubernetes_pod_node_name"] == "n1"
            wait_for(lambda: len(k8s.watchers) == 3)
            k8s.push_event("MODIFIED", k8s_namespace("shop", labels={"team": "search"}), resource="namespaces")
            assert wait_for(
                lambda: comp.exports["targets"][0].get("__meta_kubernetes_namespace_label_team") == "search")
            assert "__meta_kubernetes_namespace_annotation_owner" not in comp.exports["targets"][0]
            k8s.push_event("MODIFIED", k8s_node("n1", "10.0.0.1", labels={"pool": "spot"}), resource="nodes")
            assert wait_for(lambda: comp.exports["targets"][0].get("__meta_kubernetes_node_label_pool") == "spot")
        # without attach_metadata: none of those labels, and no node or namespace request
        before = len(k8s.requests)
        with running(f'discovery.kubernetes "k" {{\n  role = "pod"\n  api_server = "{k8s.url}"\n}}\n') as c:
            targets = c.component("discovery.kubernetes.k").exports["targets"]
            assert len(targets) == 2
            assert not any(k.startswith(("__meta_kubernetes_namespace_", "__meta_kubernetes_node_"))
                           for t in targets for k in t)
            assert all("/pods" in r for r in k8s.requests[before:])
    finally:
        k8s.close()


def test_docker_discovery_oauth2_client_credentials(tmp_path):
    from .peers import OAuth2TokenServer
    secret_file = tmp_path / "client-secret"
    secret_file.write_text("cs-123\n")
    tokens = OAuth2TokenServer("hotstack", "cs-123", "tok-abc")
    docker = DockerServer(str(tmp_path / "d.sock"), [docker_container("a" * 64, "o")], DOCKER_NETWORKS,
                          authorization="Bearer tok-abc")
    try:
        with running(f'discovery.docker "d" {{\n  host = "unix://{tmp_path}/d.sock"\n  oauth2 {{\n'
                     f'    client_id = "hotstack"\n    client_secret_file = "{secret_file}"\n'
                     f'    token_url = "{tokens.url}"\n    scopes = ["read", "list"]\n'
                     f'    endpoint_params = {{"audience" = "docker"}}\n  }}\n}}\n') as c:
            comp = c.component("discovery.docker.d")
            assert healthy_names(comp) == ["/o"]
            assert tokens.forms[0] == {"grant_type": "client_credentials", "scope": "read list", "audience": "docker"}
            comp.refresh()
            assert len(tokens.forms) == 1   # the token is kept until it expires
    finally:
        tokens.close()
        docker.close()


def test_docker_discovery_through_a_proxy_and_redirects(tmp_path):
    """proxy_url (plain HTTP: absolute-form requests; HTTPS: a CONNECT tunnel), no_proxy, and
    follow_redirects true (followed) / false (refused, with the reason)."""
    import base64

    from .peers import HTTPProxy, RedirectServer, make_pki
    proxy = HTTPProxy()
    plain = DockerServer("", [docker_container("b" * 64, "plain")], DOCKER_NETWORKS, tcp=True)
    pki = make_pki(tmp_path)
    secure = DockerServer("", [docker_container("c" * 64, "secure")], DOCKER_NETWORKS,
                          tls=pki.server_context(require_client_cert=False))
    redirect = RedirectServer(f"http://{plain.url}")
    try:
        def discover(body: str):
            with running(f'discovery.docker "d" {{\n{body}}}\n') as c:
                comp = c.component("discovery.docker.d")
                return (comp.health.state, comp.health.message, [t["__meta_docker_container_name"]
                                                                 for t in comp.exports["targets"]])

        with_user = proxy.url.replace("http://", "http://puser:p%40ss@")
        state, _, names = discover(f'  host = "tcp://{plain.url}"\n  proxy_url = "{with_user}"\n')
        assert (state, names) == ("healthy", ["/plain"])
        assert f"GET http://{plain.url}/v1.41/containers/json" in proxy.requests
        assert proxy.proxy_authorization[-1] == "Basic " + base64.b64encode(b"puser:p@ss").decode()
        state, _, names = discover(f'  host = "tcp://{secure.url}"\n  proxy_url = "{proxy.url}"\n'
                                   f'  tls_config {{\n    ca_file = "{pki.ca}"\n  }}\n')
        assert (state, names) == ("healthy", ["/secure"])
        assert f"CONNECT {secure.url}" in proxy.requests
        before = len(proxy.requests)
        state, _, names = discover(f'  host = "tcp://{plain.url}"\n  proxy_url = "{proxy.url}"\n'
                                   f'  no_proxy = "127.0.0.1"\n')
        assert (state, names) == ("healthy", ["/plain"]) and len(proxy.requests) == before
        state, _, names = discover(f'  host = "tcp://{redirect.url}"\n')
        assert (state, names) == ("healthy", ["/plain"]) and redirect.requests
        state, message, names = discover(f'  host = "tcp://{redirect.url}"\n  follow_redirects = false\n')
        assert state == "unhealthy" and "follow_redirects is false" in message and names == []
    finally:
        for s in (proxy, plain, secure, redirect):
            s.close()


def test_docker_discovery_proxy_from_environment(monkeypatch):
    """proxy_from_environment: the proxy of the scheme from HTTP(S)_PROXY, the hosts of NO_PROXY
    direct, as Go's http.ProxyFromEnvironment."""
    from .peers import HTTPProxy
    proxy = HTTPProxy()
    plain = DockerServer("", [docker_container("b" * 64, "plain")], DOCKER_NETWORKS, tcp=True)
    try:
        for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        body = f'discovery.docker "d" {{\n  host = "tcp://{plain.url}"\n  proxy_from_environment = true\n}}\n'
        with running(body) as c:
            assert [t["__meta_docker_container_name"] for t in c.component("discovery.docker.d").exports["targets"]] \
                == ["/plain"]
        assert f"GET http://{plain.url}/v1.41/containers/json" in proxy.requests, proxy.requests
        before = len(proxy.requests)
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        with running(body) as c:
            assert c.component("discovery.docker.d").health.state == "healthy"
        assert len(proxy.requests) == before, proxy.requests[before:]
    finally:
        proxy.close()
        plain.close()
