"""discovery.dockerswarm against a real Docker Engine in Swarm mode (Debian's dockerd, in a network
namespace of its own: Swarm's bridge, ingress and overlay networks are made there, none on the
host's), its tasks, services and nodes roles; and the seed's use of it: pyroscope.ebpf profiling a
service's task by its container id, named from its container label service_name."""

from __future__ import annotations

import json
import time

import pytest

from ..docker_engine import DockerEngine, dockerd_path
from .conftest import CONFIGS  # noqa: F401  (the Alloy tests' fixtures: agent, pyroscope)

pytestmark = pytest.mark.root

SPIN = "hotstack_alloy_spin_leaf"


@pytest.fixture(scope="module")
def swarm(tmp_path_factory, static_spin):
    """A single-node Swarm with a service `web` (one task running the spin workload on the overlay
    network hsnet): (engine, the task's container id, the service id)."""
    if dockerd_path() is None:
        pytest.fail("dockerd is not installed: run `sudo bash .ci/install.d/parity.sh` (Debian's docker.io)")
    engine = DockerEngine(tmp_path_factory.mktemp("swarm"), own_network_namespace=True)
    try:
        engine.docker("swarm", "init", "--advertise-addr", "127.0.0.1")
        engine.docker("network", "create", "-d", "overlay", "--label", "purpose=test", "hsnet")
        engine.import_image("hotstack-test/swarm-spin:1", {"/spin": static_spin})
        service = engine.docker("service", "create", "--detach", "--name", "web", "--network", "hsnet",
                                "--label", "com.example.team=pay", "--container-label", "service_name=my-web",
                                "hotstack-test/swarm-spin:1", "/spin")
        container = ""
        deadline = time.monotonic() + 90
        while not container and time.monotonic() < deadline:
            tasks = json.loads(engine.docker("service", "ps", "web", "--format", "{{json .}}", "--no-trunc")
                               .splitlines()[0] or "{}")
            if tasks.get("CurrentState", "").startswith("Running"):
                container = engine.docker("ps", "-q", "--no-trunc", "--filter", "label=service_name=my-web")
            time.sleep(0.5)
        assert container, engine.log.read_text()[-2000:]
        yield engine, container, service
    finally:
        try:
            engine.docker("service", "rm", "web", timeout=60)
        except Exception:   # noqa: BLE001 - the engine goes anyway
            pass
        engine.stop()


def _targets(a, component: str) -> list[dict]:
    return a.json(f"/api/v0/web/components/{component}")["exports"]["targets"]


def test_roles_give_prometheus_labels(agent, swarm):
    engine, container, service = swarm
    a = agent(f'discovery.dockerswarm "tasks" {{\n  host = "{engine.host}"\n  role = "tasks"\n}}\n'
              f'discovery.dockerswarm "services" {{\n  host = "{engine.host}"\n  role = "services"\n  port = 9090\n}}\n'
              f'discovery.dockerswarm "nodes" {{\n  host = "{engine.host}"\n  role = "nodes"\n'
              f'  filter {{\n    name = "role"\n    values = ["manager"]\n  }}\n}}\n')
    a.wait_ready()
    [task] = [t for t in _targets(a, "discovery.dockerswarm.tasks") if t.get("__meta_dockerswarm_service_name") == "web"]
    assert task["__meta_dockerswarm_task_container_id"] == container
    assert task["__meta_dockerswarm_container_label_service_name"] == "my-web"
    assert task["__meta_dockerswarm_service_id"] == service
    assert task["__meta_dockerswarm_service_label_com_example_team"] == "pay"
    assert task["__meta_dockerswarm_service_mode"] == "replicated"
    assert task["__meta_dockerswarm_task_desired_state"] == "running" and task["__meta_dockerswarm_task_slot"] == "1"
    assert task["__meta_dockerswarm_network_name"] == "hsnet"
    assert task["__meta_dockerswarm_network_label_purpose"] == "test"
    assert task["__meta_dockerswarm_node_role"] == "manager" and task["__address__"].endswith(":80")
    services = [t for t in _targets(a, "discovery.dockerswarm.services") if t.get("__meta_dockerswarm_service_name") == "web"]
    assert services and all(t["__address__"].endswith(":9090") for t in services), services
    assert services[0]["__meta_dockerswarm_service_task_container_image"].startswith("hotstack-test/swarm-spin:1")
    [node] = _targets(a, "discovery.dockerswarm.nodes")
    assert node["__meta_dockerswarm_node_manager_leader"] == "true"
    assert node["__address__"] == "127.0.0.1:80" and node["__meta_dockerswarm_node_status"] == "ready"
    page = a.json("/api/v0/web/components/discovery.dockerswarm.tasks")
    assert page["health"]["state"] == "healthy", page["health"]
    assert a.stop() == 0


def test_seed_service_name_from_a_swarm_task(agent, pyroscope, swarm):
    """pyroscope.ebpf profiles the task's container (by __meta_dockerswarm_task_container_id) and
    names it from the container label service_name, as the seed says."""
    engine, _container, _service = swarm
    a = agent(f'discovery.dockerswarm "swarm" {{\n  host = "{engine.host}"\n  role = "tasks"\n}}\n'
              f'pyroscope.write "w" {{\n  endpoint {{\n    url = "{pyroscope.url}"\n  }}\n}}\n'
              f'pyroscope.ebpf "e" {{\n  targets = discovery.dockerswarm.swarm.targets\n'
              f'  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "2s"\n}}\n')
    a.wait_ready()
    found = pyroscope.wait_for(lambda s: SPIN in s.functions())
    assert found, ([s.labels for s in pyroscope.series][:5], a.log.read_text()[-2000:])
    assert {s.labels.get("service_name") for s in found} == {"my-web"}
    assert a.stop() == 0


def test_bad_role_is_one_line(agent, tmp_path):
    from ..conftest import hotstack
    path = tmp_path / "s.alloy"
    path.write_text('discovery.dockerswarm "s" {\n  host = "unix:///nope.sock"\n  role = "containers"\n}\n')
    r = hotstack("agent", "--validate", str(path))
    assert r.returncode == 2 and "role 'containers': expected one of tasks, services, nodes" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
