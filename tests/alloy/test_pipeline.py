"""End to end, as root: the seed's examples against the real kernel and /proc, a Docker Engine
API, a Kubernetes API and a Connect-protocol Pyroscope server; a known workload's frames must
arrive with the labels the pipeline gives them."""

from __future__ import annotations

import re
import time

import pytest

from ..conftest import hotstack
from .peers import KubernetesServer, k8s_pod
from .conftest import seed_config

pytestmark = pytest.mark.root

SPIN = "hotstack_alloy_spin_leaf"


def fast(config: str, pyroscope_url: str, *, block: str = "pyroscope.ebpf", interval: str = "2s") -> str:
    """The seed config pointed at the test peers, with a short collect_interval (the only edits)."""
    config = config.replace("http://pyroscope:4040", pyroscope_url).replace("<PYROSCOPE_URL>", pyroscope_url)
    head = config.index(block + " ")
    brace = config.index("{", head) + 1
    return config[:brace] + f'\n  collect_interval = "{interval}"' + config[brace:]


def has_spin(series) -> bool:
    return SPIN in series.functions()


def test_process_example_against_real_proc(agent, pyroscope, spin_binary, workloads):
    spin = workloads([spin_binary])
    text = seed_config("beyla_process.alloy")
    text = text[text.index('discovery.process "all"'):]
    a = agent(fast(text, pyroscope.url))
    a.wait_ready()
    found = pyroscope.wait_for(lambda s: s.labels.get("service_name") == "alloy-spin" and has_spin(s))
    assert found, (f"no profile of the spin workload; got {[s.labels for s in pyroscope.series][:5]}",
                   a.log.read_text()[-3000:], a.get("/metrics")[1][-3000:])
    s = found[0]
    assert s.labels["__name__"] == "process_cpu"
    assert s.labels["otel.scope.name"] == "com.grafana.alloy/pyroscope.ebpf"
    assert "__process_pid__" not in s.labels and "__meta_process_exe" not in s.labels
    assert s.gzipped and s.sample_type() == ("cpu", "nanoseconds")
    assert s.profile.period == 1_000_000_000 // 19
    assert s.headers["Content-Type"] == "application/proto"
    # the pipeline's own account of it
    metrics = a.get("/metrics")[1]
    assert_alloy_metrics(metrics, pyroscope.url)
    page = a.json("/api/v0/web/components/pyroscope.ebpf.request_profiles")
    assert page["health"]["state"] == "healthy"
    assert any(t.get("service_name") == "alloy-spin" and t.get("__process_pid__") == str(spin.pid)
               for t in page["debug_info"]["targets"])
    assert any(f["symbols"] > 0 and f["path"].endswith("alloy-spin") for f in page["debug_info"]["elf_cache"]["files"])
    assert any(p["pid"] == spin.pid for p in page["debug_info"]["pid_cache"]["processes"])
    assert a.stop() == 0


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name` whose labels include `labels` (any order), else None."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', head[len(name):]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return None


def assert_alloy_metrics(text: str, url: str) -> None:
    """/metrics as Alloy shows it for this pipeline: component_id/component_path on every
    component's metrics, pyroscope.write's per endpoint (its URL), the latency histograms, the
    fan-out's, and the embedded profiler's with otel_scope_name="pyroscope.ebpf"."""
    ebpf = {"component_id": "pyroscope.ebpf.request_profiles", "component_path": "/"}
    write = {"component_id": "pyroscope.write.profiles", "component_path": "/", "endpoint": url}
    assert metric(text, "pyroscope_ebpf_pprofs_total", service_name="alloy-spin", **ebpf) >= 1, text
    assert metric(text, "pyroscope_ebpf_pprof_bytes_total", service_name="alloy-spin", **ebpf) > 0
    assert metric(text, "pyroscope_ebpf_profiling_sessions_total", **ebpf) == 1
    assert metric(text, "pyroscope_ebpf_active_targets", **ebpf) >= 1
    assert metric(text, "pyroscope_forwarded_entries_total", **ebpf) >= 1
    assert metric(text, "pyroscope_fanout_latency_count", **ebpf) >= 1
    assert metric(text, "pyroscope_fanout_latency_bucket", le="+Inf", **ebpf) >= 1
    assert metric(text, "pyroscope_write_sent_profiles_total", **write) >= 1
    assert metric(text, "pyroscope_write_sent_bytes_total", **write) > 0
    assert metric(text, "pyroscope_write_dropped_profiles_total", **write) == 0
    assert metric(text, "pyroscope_write_retries_total", **write) == 0
    assert "# TYPE pyroscope_write_latency histogram" in text
    for kind, endpoint in (("push_total", "-"), ("push_endpoint", url), ("push_downstream", url)):
        n = metric(text, "pyroscope_write_latency_count", type=kind, **{**write, "endpoint": endpoint})
        assert n and n >= 1, (kind, text)
    # the embedded profiler's: only those recorded so far, each with its scope
    scope = {**ebpf, "otel_scope_name": "pyroscope.ebpf"}
    assert metric(text, "NumProcAttempts_total", **scope) >= 1, text
    assert metric(text, "ELFInfoCacheMiss_total", **scope) >= 1
    assert "ErrProcNotExist_total" not in text or metric(text, "ErrProcNotExist_total", **scope) > 0
    assert "component=" not in text   # the old label name is gone


def test_docker_example(agent, pyroscope, spin_binary, docker_engine, spin_image, workloads):
    """The seed's docker example against a real Docker Engine: the container has its own mount
    namespace and filesystem (its program is only there), so frames are symbolized through
    /proc/PID/root."""
    cid = docker_engine.run(spin_image, "web", ["/spin"], labels={"com.example.team": "pay"})
    workloads([spin_binary])          # the same program outside every container: not profiled
    text = fast(seed_config("docker.alloy"), pyroscope.url).replace("unix:///var/run/docker.sock", docker_engine.host)
    a = agent(text)
    a.wait_ready()
    found = pyroscope.wait_for(lambda s: has_spin(s))
    assert found, ([s.labels for s in pyroscope.series][:5], a.log.read_text()[-3000:])
    time.sleep(2.5)   # one more interval: anything from outside the container would be there by now
    names = {s.labels.get("service_name") for s in pyroscope.series}
    assert names == {"/web"}, names
    s = found[0]
    assert s.labels["__name__"] == "process_cpu"
    assert "__meta_docker_container_id" not in s.labels and "__container_id__" not in s.labels
    targets = a.json("/api/v0/web/components/discovery.docker.linux")["exports"]["targets"]
    assert [t["__meta_docker_container_id"] for t in targets] == [cid]
    assert targets[0]["__meta_docker_container_name"] == "/web"
    assert targets[0]["__meta_docker_container_label_com_example_team"] == "pay"
    assert targets[0]["__meta_docker_container_network_mode"] == "none"   # --network none: no address
    assert a.json("/api/v0/web/components/discovery.docker.linux")["health"]["state"] == "healthy"


def test_kubernetes_example(agent, pyroscope, containerd_cri):
    """The seed's kubernetes example: pods made over containerd's CRI as kubelet makes them (real
    containers), listed by a Kubernetes API test server with their real container ids."""
    from ..runtime_fixtures import CRI_SPIN_IMAGE
    c1 = containerd_cri.run_pod("shop", "spin-pod", "uid-spin", "spin", CRI_SPIN_IMAGE, ["/spin"],
                                cgroup_parent="/hotstack-k8s-example")
    c2 = containerd_cri.run_pod("shop", "other-node", "uid-other", "spin", CRI_SPIN_IMAGE, ["/spin"],
                                cgroup_parent="/hotstack-k8s-example")
    pods = [
        k8s_pod("spin-pod", "shop", "node-a", "spin", f"containerd://{c1}", labels={"app": "shop"}),
        k8s_pod("other-node", "shop", "node-b", "spin", f"containerd://{c2}"),
        k8s_pod("done", "shop", "node-a", "job", "containerd://" + "f" * 64, phase="Succeeded"),
    ]
    k8s = KubernetesServer(pods)
    try:
        text = fast(seed_config("kubernetes.alloy"), pyroscope.url)
        text = text.replace('role = "pod"\n', f'role = "pod"\n  api_server = "{k8s.url}"\n', 1)
        a = agent(text, env={"HOSTNAME": "node-a"})
        a.wait_ready()
        found = pyroscope.wait_for(lambda s: s.labels.get("pod") == "spin-pod" and has_spin(s))
        assert found, ([s.labels for s in pyroscope.series], a.log.read_text()[-3000:], k8s.requests)
        labels = found[0].labels
        assert labels["service_name"] == "ebpf/shop/spin"
        assert (labels["namespace"], labels["container"], labels["node"], labels["app"]) == \
            ("shop", "spin", "node-a", "shop")
        assert any("fieldSelector=spec.nodeName%3Dnode-a" in r and "watch=1" not in r for r in k8s.requests)
        assert not [s for s in pyroscope.series if s.labels.get("pod") == "other-node"]
        # a pod scheduled later on this node arrives through the watch
        k8s.push_event("ADDED", k8s_pod("other-node", "shop", "node-a", "spin", f"containerd://{c2}"))
        late = pyroscope.wait_for(lambda s: s.labels.get("pod") == "other-node" and has_spin(s), timeout=30)
        assert late, "the pod added through the watch was not profiled"
        ebpf = a.json("/api/v0/web/components/pyroscope.ebpf.local_pods")
        assert ebpf["debug_info"]["active_targets"] == 2
    finally:
        k8s.close()


def test_container_matching_by_cgroup(agent, pyroscope, spin_binary, docker_engine, spin_image, workloads):
    """A __container_id__ target matches the processes whose cgroup names that container: a real
    Docker container (its own mount namespace and filesystem), the same program outside it left out."""
    cid = docker_engine.run(spin_image, "matching", ["/spin"])
    inside = docker_engine.pid("matching")
    outside = workloads([spin_binary])
    text = f'''
pyroscope.write "local" {{
  endpoint {{
    url     = "{pyroscope.url}"
    headers = {{"X-Scope-OrgID" = "tenant-1"}}
    basic_auth {{
      username = "alloy"
      password = "s3cret"
    }}
  }}
  external_labels = {{"cluster" = "test"}}
}}
pyroscope.ebpf "matching" {{
  targets          = [{{"__container_id__" = "{cid}", "team" = "payments"}}]
  forward_to       = [pyroscope.write.local.receiver]
  collect_interval = "2s"
  pid_label        = true
  comm             = "label"
}}
'''
    a = agent(text)
    a.wait_ready()
    found = pyroscope.wait_for(has_spin)
    assert found
    assert found[0].headers["X-Scope-OrgID"] == "tenant-1"
    assert found[0].headers["Authorization"] == "Basic " + __import__("base64").b64encode(b"alloy:s3cret").decode()
    time.sleep(2.5)
    pids = set()
    for s in pyroscope.series:
        assert s.labels["team"] == "payments" and s.labels["cluster"] == "test", s.labels
        assert s.labels["service_name"] == "unspecified"
        strings = s.profile.string_table
        for sample in s.profile.sample:
            pids.update(strings[lab.str] for lab in sample.label if strings[lab.key] == "pid")
            assert {strings[lab.key] for lab in sample.label} == {"pid", "comm"}
    assert pids == {str(inside)}, (pids, outside.pid)


def test_off_cpu_and_probe_links_reach_pyroscope(agent, pyroscope, spin_binary, workloads):
    import sys
    sleeper = workloads([sys.executable, "-c", "import time\nwhile True: time.sleep(0.02)"])
    spin = workloads([spin_binary])
    text = f'''
pyroscope.write "local" {{
  endpoint {{
    url = "{pyroscope.url}"
  }}
}}
pyroscope.ebpf "events" {{
  targets           = [{{"__process_pid__" = "{sleeper.pid}", "service_name" = "sleeper"}},
                       {{"__process_pid__" = "{spin.pid}", "service_name" = "spin"}}]
  forward_to        = [pyroscope.write.local.receiver]
  collect_interval  = "2s"
  off_cpu_threshold = 1.0
  probe_links       = ["uprobe:{spin_binary}:hotstack_alloy_spin_leaf"]
}}
'''
    a = agent(text)
    a.wait_ready()
    off = pyroscope.wait_for(lambda s: s.labels.get("__name__") == "offcpu" and s.labels["service_name"] == "sleeper")
    assert off, ([s.labels for s in pyroscope.series], a.log.read_text()[-2000:])
    assert off[0].sample_type() == ("offcpu", "nanoseconds") and off[0].total() > 0
    probe = pyroscope.wait_for(lambda s: s.sample_type() == ("uprobe", "count") and s.labels["service_name"] == "spin")
    assert probe, [(s.labels, s.sample_type()) for s in pyroscope.series]
    assert probe[0].labels["__name__"] == "process_cpu" and SPIN in probe[0].functions()


def kernel_mappings(series) -> set[str]:
    """The kernel's mappings a received profile's frames are in ([kernel.kallsyms], [module])."""
    strings = series.profile.string_table
    return {strings[m.filename] for m in series.profile.mapping if strings[m.filename].startswith("[")}


def one_target_config(url: str, label: str, pid: int, service: str, extra: str) -> str:
    """pyroscope.ebpf `label` profiling one pid every 2 s into a pyroscope.write at `url`, with
    `extra` arguments (one per line)."""
    return f'''
pyroscope.write "local" {{
  endpoint {{
    url = "{url}"
  }}
}}
pyroscope.ebpf "{label}" {{
  targets          = [{{"__process_pid__" = "{pid}", "service_name" = "{service}"}}]
  forward_to       = [pyroscope.write.local.receiver]
  collect_interval = "2s"
{extra}
}}
'''


def test_kernel_frames_false_applies_to_off_cpu_profiles(agent, pyroscope, workloads):
    """kernel_frames = false: no kernel frame in the off-CPU profiles either, whose program takes
    its stacks where threads leave the CPU, in the kernel (kernel probes: tests/probes/test_kprobes.py)."""
    import sys
    sleeper = workloads([sys.executable, "-c", "import time\nwhile True: time.sleep(0.02)"])
    text = one_target_config(pyroscope.url, "events", sleeper.pid, "sleeper",
                             "  kernel_frames     = false\n  off_cpu_threshold = 1.0")
    a = agent(text)
    a.wait_ready()
    off = pyroscope.wait_for(lambda s: s.labels.get("__name__") == "offcpu" and s.total() > 0)
    assert off, ([(s.labels, s.sample_type()) for s in pyroscope.series], a.log.read_text()[-2000:])
    time.sleep(2.5)   # another interval
    assert {s.sample_type() for s in pyroscope.series} >= {("offcpu", "nanoseconds")}
    for s in pyroscope.series:
        assert not kernel_mappings(s), (s.sample_type(), kernel_mappings(s), sorted(s.functions())[:20])
        assert not {"schedule", "do_syscall_64", "do_nanosleep"} & s.functions(), (s.sample_type(),
                                                                                    sorted(s.functions()))
    assert all(s.functions() for s in off), "off-CPU samples keep their user frames"


def test_verbose_mode_logs_sessions_targets_tables_and_pushes(agent, pyroscope, spin_binary, workloads):
    """verbose_mode = true: the profiler's debug lines, at --log.level info (sessions, targets
    matched, unwind tables, pushes); without it none of them."""
    spin = workloads([spin_binary])
    text = one_target_config(pyroscope.url, "loud", spin.pid, "spin", "  verbose_mode     = true")
    a = agent(text)
    a.wait_ready()
    assert pyroscope.wait_for(has_spin), a.log.read_text()[-2000:]
    time.sleep(2.5)
    log = a.log.read_text()
    debug = [line for line in log.splitlines() if "level=DEBUG" in line]
    for what in (r"pyroscope\.ebpf\.loud: session started: process_cpu",
                 r"pyroscope\.ebpf\.loud: 1 targets: 1 by pid",
                 r"pyroscope\.ebpf\.loud: process_cpu: \d+ stacks, [1-9]\d* matched to targets \(spin\)",
                 r"unwind table of \S*alloy-spin (built|read from the cache)",
                 r"pyroscope\.ebpf\.loud: forwarded [1-9]\d* profiles",
                 rf"{re.escape(pyroscope.url)}\S*: pushed [1-9]\d* series"):
        assert any(re.search(what, line) for line in debug), (what, log[-3000:])
    assert a.stop() == 0
    quiet = agent(text.replace("verbose_mode     = true", "verbose_mode     = false"))
    quiet.wait_ready()
    count = len(pyroscope.series)
    assert pyroscope.wait_for(lambda s: len(pyroscope.series) > count), quiet.log.read_text()
    assert quiet.stop() == 0
    assert "level=DEBUG" not in quiet.log.read_text()
