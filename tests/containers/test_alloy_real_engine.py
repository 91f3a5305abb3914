"""The Alloy docker example end to end against a real Docker Engine: discovery.docker finds the
container, pyroscope.ebpf profiles its process, and the frames of its program, which exists only
inside the container's own filesystem, are symbolized through /proc/PID/root."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.root


def test_docker_example_profiles_a_real_container(docker_engine, spin_image, agent, pyroscope):
    cid = docker_engine.run(spin_image, "hotstack-alloy-web", ["/spin"])
    pid = docker_engine.pid("hotstack-alloy-web")
    assert not os.path.exists("/spin") and os.path.exists(f"/proc/{pid}/root/spin")
    config = f'''
discovery.docker "linux" {{
  host             = "{docker_engine.host}"
  refresh_interval = "1s"
}}
discovery.relabel "local_containers" {{
  targets = discovery.docker.linux.targets
  rule {{
    action        = "replace"
    source_labels = ["__meta_docker_container_name"]
    target_label  = "service_name"
  }}
}}
pyroscope.write "staging" {{
  endpoint {{
    url = "{pyroscope.url}"
  }}
}}
pyroscope.ebpf "default" {{
  forward_to       = [pyroscope.write.staging.receiver]
  targets          = discovery.relabel.local_containers.output
  collect_interval = "2s"
}}
'''
    a = agent(config)
    a.wait_ready()
    targets = a.json("/api/v0/web/components/discovery.docker.linux")["exports"]["targets"]
    assert [t["__meta_docker_container_id"] for t in targets] == [cid], targets
    found = pyroscope.wait_for(lambda s: s.labels.get("service_name") == "/hotstack-alloy-web"
                               and "hotstack_alloy_spin_leaf" in s.functions(), timeout=90)
    assert found, ([(s.labels, sorted(s.functions())[:10]) for s in pyroscope.series][:5], a.log.read_text()[-2000:])
