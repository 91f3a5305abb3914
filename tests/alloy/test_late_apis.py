"""A DaemonSet's agent may start before the Kubernetes API or the Docker Engine answers: it must
not exit (a crash loop), but run, say which component is unhealthy and why, retry with backoff,
and become healthy with the targets once the API answers. The peers start late, on the address
the agent was given."""

from __future__ import annotations

import re
import time

from ..conftest import wait_for
from .conftest import seed_config
from .peers import DOCKER_NETWORKS, DockerServer, KubernetesServer, docker_container, free_port, k8s_pod


def _discovery_only(config: str, block: str) -> str:
    """The seed config up to (without) its pyroscope.* blocks: discovery and relabel only."""
    blocks = re.split(r"(?m)^(?=[a-z_.]+ \")", config)   # at each top-level block
    return "".join(b for b in blocks if not b.startswith("pyroscope."))


def _check_late_start(a, component: str, start_api, reason: str) -> None:
    a.wait_ready()
    status, text = a.get("/-/healthy")
    assert status == 500 and component in text and reason in text, (status, text)
    page = a.json(f"/api/v0/web/components/{component}")
    assert page["health"]["state"] == "unhealthy" and "retrying" in page["health"]["message"]
    time.sleep(2)
    assert a.proc.poll() is None, a.log.read_text()   # still running: no crash loop
    server = start_api()
    try:
        assert wait_for(lambda: a.get("/-/healthy")[0] == 200, timeout=60), \
            (a.get("/-/healthy"), a.log.read_text()[-2000:])
        targets = a.json(f"/api/v0/web/components/{component}")["exports"]["targets"]
        assert len(targets) == 1, targets
        relabeled = [c for c in a.json("/api/v0/web/components") if c["name"] == "discovery.relabel"]
        assert relabeled and wait_for(
            lambda: a.json(f"/api/v0/web/components/{relabeled[0]['id']}")["exports"]["output"], timeout=60)
    finally:
        server.close()


def test_kubernetes_api_that_answers_late(agent):
    port = free_port()
    text = seed_config("kubernetes.alloy").replace(
        'role = "pod"\n', f'role = "pod"\n  api_server = "http://127.0.0.1:{port}"\n', 1)
    a = agent(_discovery_only(text, "discovery.kubernetes"), env={"HOSTNAME": "n1"})
    _check_late_start(a, "discovery.kubernetes.all_pods",
                      lambda: KubernetesServer([k8s_pod("a", "ns1", "n1", "app", "containerd://" + "1" * 64)],
                                               port=port),
                      f"cannot reach http://127.0.0.1:{port}")


def test_docker_engine_that_answers_late(agent, tmp_path):
    sock = tmp_path / "late.sock"
    text = seed_config("docker.alloy").replace("unix:///var/run/docker.sock", f"unix://{sock}")
    a = agent(_discovery_only(text, "discovery.docker"))
    _check_late_start(a, "discovery.docker.linux",
                      lambda: DockerServer(str(sock), [docker_container("f" * 64, "late")], DOCKER_NETWORKS),
                      f"cannot reach unix://{sock}")
