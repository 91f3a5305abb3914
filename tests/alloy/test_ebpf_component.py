"""pyroscope.ebpf attribution without the kernel: target matching (pid first, then container id),
label injection, service_name inference order, targets_only, comm, stubs; the local store."""

from __future__ import annotations

import os
import time

import pytest

from hotstack.alloy.components.ebpf_args import SCHEMA
from hotstack.alloy.components.pyroscope_ebpf import PyroscopeEbpf, TargetIndex, series_labels
from hotstack.alloy.components.targets import container_id_of_target, infer_service_name
from hotstack.profile.model import Frame, Profile, Sample

CID = "ab" * 32


def args(**kw) -> dict:
    a = SCHEMA.defaults()
    a.update(kw)
    return a


def profile(*samples: Sample) -> Profile:
    return Profile(samples=list(samples), start_ns=1, duration_ns=2, frequency_hz=19)


def sample(pid: int, cid: str = "", name: str = "work", resolved: bool = True) -> Sample:
    frame = Frame(name, module="/bin/w", address=0x1234, resolved=resolved)
    return Sample((frame,), 3, pid, pid, "comm-x", (("container_id", cid),) if cid else ())


@pytest.mark.parametrize("target,want", [
    ({"service_name": "mine", "__meta_docker_container_name": "/web"}, "mine"),
    ({"__meta_kubernetes_pod_annotation_pyroscope_io_service_name": "annotated",
      "__meta_kubernetes_namespace": "ns", "__meta_kubernetes_pod_container_name": "c"}, "annotated"),
    ({"__meta_kubernetes_namespace": "ns", "__meta_kubernetes_pod_container_name": "c",
      "__meta_docker_container_name": "/web"}, "ebpf/ns/c"),
    ({"__meta_kubernetes_namespace": "ns", "__meta_docker_container_name": "/web"}, "/web"),
    ({"__meta_dockerswarm_container_label_service_name": "swarm1", "__meta_dockerswarm_service_name": "s2"}, "swarm1"),
    ({"__meta_dockerswarm_service_name": "s2"}, "s2"),
    ({}, "unspecified"),
])
def test_service_name_inference_order(target, want):
    assert series_labels(target, pid=1)["service_name"] == want
    if "service_name" not in target:
        assert infer_service_name(target) == want


@pytest.mark.parametrize("target,cid", [
    ({"__container_id__": "x1", "__meta_docker_container_id": "x2"}, "x1"),
    ({"__meta_kubernetes_pod_container_id": "containerd://" + CID}, CID),
    ({"__meta_kubernetes_pod_container_id": "docker://" + CID}, CID),
    ({"__meta_kubernetes_pod_container_id": "cri-o://" + CID}, CID),
    ({"__meta_kubernetes_pod_container_id": "rkt://" + CID}, ""),
    ({"__meta_docker_container_id": CID}, CID),
    ({"__meta_dockerswarm_task_container_id": CID}, CID),
    ({"foo": "bar"}, ""),
])
def test_container_id_of_target(target, cid):
    assert container_id_of_target(target) == cid


def test_labels_injected():
    labels = series_labels({"__meta_x": "1", "__name__": "custom", "team": "a"}, container_id=CID)
    assert labels["__container_id__"] == CID and "__meta_x" not in labels
    assert labels["__name__"] == "process_cpu" and labels["team"] == "a"
    # Alloy's scope name (research notes, alloy.md), and our package's version from its metadata.
    from importlib.metadata import version
    assert labels["otel.scope.name"] == "com.grafana.alloy/pyroscope.ebpf"
    assert labels["otel.scope.version"] == version("hotstack")
    own = series_labels({"otel.scope.name": "mine"}, pid=3)
    assert own["otel.scope.name"] == "mine" and "otel.scope.version" not in own
    assert own["__process_pid__"] == "3"


def test_pid_targets_win_over_container_targets():
    index = TargetIndex([{"__container_id__": CID, "service_name": "by-container"},
                         {"__process_pid__": "10", "service_name": "by-pid"},
                         {"__process_pid__": "not-a-pid", "service_name": "ignored"},
                         {"service_name": "no-identity"}])
    assert len(index) == 2
    assert index.match(10, CID).labels["service_name"] == "by-pid"
    assert index.match(11, CID).labels["service_name"] == "by-container"
    assert index.match(12, "") is None


def test_split_per_target_and_pid():
    index = TargetIndex([{"__container_id__": CID, "service_name": "c"}, {"__process_pid__": "10", "service_name": "p"}])
    prof = profile(sample(10), sample(20, CID), sample(21, CID), sample(30), sample(0))
    out = list(PyroscopeEbpf.split(prof, index, args()))
    got = sorted((labels["service_name"], [s.pid for s in sub.samples]) for labels, sub in out)
    assert got == [("c", [20]), ("c", [21]), ("p", [10])]   # pid 30 matches nothing; pid 0 is idle
    for _, sub in out:
        assert all(s.labels == () for s in sub.samples)    # the container id is not a sample label
        assert sub.frequency_hz == 19


def test_targets_only_false_sends_the_rest_to_the_default_target():
    out = list(PyroscopeEbpf.split(profile(sample(30)), TargetIndex([]), args(targets_only=False)))
    assert len(out) == 1 and out[0][0]["service_name"] == "ebpf/unspecified"


def test_comm_stackframe_and_unsymbolized_stubs():
    index = TargetIndex([{"__process_pid__": "10"}])
    [(labels, sub)] = PyroscopeEbpf.split(profile(sample(10, resolved=False)), index,
                                          args(comm="stackframe", reporter_unsymbolized_stubs=True))
    stack = sub.samples[0].stack
    assert stack[0].name == "$ /bin/w + 0x1234"
    assert stack[-1].name == "comm-x"     # the root frame (stacks are leaf first)


def test_local_store_rotates(tmp_path):
    from hotstack.alloy.controller import load_config
    c = load_config(f'hotstack.local_store "s" {{\n  directory = "{tmp_path}"\n  retention = "1h"\n'
                    f'  max_files = 3\n}}\n', "s.alloy")
    store = c.component("hotstack.local_store.s")
    for i in range(5):
        assert store.receiver.append({"service_name": "svc/a", "__process_pid__": str(i)}, b"\x1f\x8b" + bytes(10),
                                     profile(sample(i)))
    files = sorted((tmp_path / "svc_a").glob("*.pb.gz"))
    assert len(files) == 5
    old = files[0]
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert store.rotate() == 2     # one past retention, one beyond max_files
    assert len(list((tmp_path / "svc_a").glob("*.pb.gz"))) == 3 and not old.exists()
    assert store.services() == ["svc/a"]
    # every received profile stays viewable: 5 profiles x a value of 3 on the leaf "work"
    work = [value for sl in store.slices("svc/a", 5) for stack, value in sl.samples if stack[-1][0] == "work"]
    assert sum(work) == 15


def test_lazy_mode_waits_for_targets_without_loading_anything():
    from hotstack.alloy.controller import load_config
    c = load_config('pyroscope.write "w" {}\npyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n'
                    '  lazy_mode = true\n}\n', "l.alloy")
    c.start()
    try:
        e = c.component("pyroscope.ebpf.e")
        assert e.health.state == "healthy" and "waiting for targets" in e.health.message
        assert e.profiler is None and e.debug_info()["session"] == "stopped"
    finally:
        c.stop()


def test_builtin_config_validates():
    from hotstack.alloy.controller import load_config
    from hotstack.alloy.default_config import default_config
    c = load_config(default_config("/tmp/x"), "<built-in>")
    assert c.order[-1] == "pyroscope.ebpf.default"
    assert c.component("hotstack.local_store.default").args["directory"] == "/tmp/x"


def test_go_enabled_and_kernel_version_check_reach_the_engine():
    from hotstack.alloy.components.ebpf_args import engine_config
    from hotstack.sampling.engine import Engine
    assert Engine(engine_config(args())).symbolizer.go_symbols is True
    off = engine_config(args(go_enabled=False, no_kernel_version_check=True))
    assert (off.go_symbols, off.kernel_version_check) == (False, False)
    assert Engine(off).symbolizer.go_symbols is False


def test_no_kernel_version_check_skips_only_the_version_rule():
    from hotstack.errors import HotstackError
    from hotstack.sampling.diagnose import check_preconditions
    with pytest.raises(HotstackError, match="too old"):
        check_preconditions(release="4.14.0-backported")
    check_preconditions(version_check=False, release="4.14.0-backported")   # root here: privileges pass


def test_unsupported_runtimes_and_upload_settings_warn_once_at_start(caplog):
    """Alloy's runtime unwinders default to true: accepted with ONE warning naming them; the
    debug-info upload settings (upload itself is refused) warn that they have no effect."""
    from hotstack.alloy.controller import load_config
    config = ('pyroscope.write "w" {}\npyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n'
              '  lazy_mode = true\n  php_enabled = false\n  debug_info {\n    worker_num = 4\n'
              '    strip_text_section = true\n  }\n}\n')
    c = load_config(config, "w.alloy")
    with caplog.at_level("WARNING"):
        c.start()
        c.stop()
    lines = [r.getMessage() for r in caplog.records if "pyroscope.ebpf.e" in r.getMessage()]
    runtimes = [line for line in lines if "not supported yet" in line and "unwinder" in line]
    assert len(runtimes) == 1
    assert "dotnet_enabled" in runtimes[0]
    assert "hotspot_enabled" not in runtimes[0]  # implemented: runtimes/hotspot
    assert "perl_enabled" not in runtimes[0]    # implemented: runtimes/perl
    assert "php_enabled" not in runtimes[0]
    assert "v8_enabled" not in runtimes[0]      # implemented: runtimes/v8
    assert "ruby_enabled" not in runtimes[0]    # implemented: runtimes/ruby
    upload = [line for line in lines if "debug-info upload" in line]
    assert len(upload) == 1 and "debug_info.worker_num" in upload[0] and "debug_info.strip_text_section" in upload[0]
    assert "queue_size" not in upload[0]
    quiet = load_config(config.replace("php_enabled = false", "perl_enabled = false\n  hotspot_enabled = false\n"
                                       "  ruby_enabled = false\n  v8_enabled = false\n  dotnet_enabled = false\n"
                                       "  php_enabled = false").replace("    worker_num = 4\n    strip_text_section = true\n", ""),
                        "q.alloy")
    caplog.clear()
    with caplog.at_level("WARNING"):
        quiet.start()
        quiet.stop()
    assert not [r for r in caplog.records if "unwinder" in r.getMessage() or "debug-info" in r.getMessage()]


def test_targets_by_pid_alone_are_sampled_in_the_kernel_only():
    """targets_only with targets by pid: the engine samples their pids only (the rest of the host
    is dropped in the kernel); a target by container id takes any pid of it, so every pid is
    sampled; targets_only = false samples every pid too."""
    by_pid = TargetIndex([{"__process_pid__": "41"}, {"__process_pid__": "42"}])
    assert PyroscopeEbpf._kernel_pids(by_pid, args()) == {41, 42}
    assert PyroscopeEbpf._kernel_pids(TargetIndex([]), args()) == set()
    mixed = TargetIndex([{"__process_pid__": "41"}, {"__container_id__": CID}])
    assert PyroscopeEbpf._kernel_pids(mixed, args()) is None
    assert PyroscopeEbpf._kernel_pids(by_pid, args(targets_only=False)) is None
    from hotstack.alloy.components.ebpf_args import engine_config
    assert engine_config(args()).pids_at_run_time is True
    assert engine_config(args(targets_only=False)).pids_at_run_time is False


def test_re_evaluation_with_the_same_arguments_redoes_nothing():
    """discovery.process republishes whenever any process of the host comes or goes, and every
    component downstream is evaluated again: pyroscope.ebpf with the same targets keeps its target
    index and does not hand its engine the same filters again."""
    from hotstack.alloy.controller import load_config
    c = load_config('pyroscope.write "w" {}\npyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n'
                    f'  targets = [{{"__process_pid__" = "{os.getpid()}", "service_name" = "me"}}]\n'
                    '  sample_rate = 19\n}\n', "same.alloy")
    c.start()
    try:
        e = c.component("pyroscope.ebpf.e")
        assert e.profiler is not None, e.health
        handed: list = []
        real = e.profiler.set_target_filter
        e.profiler.set_target_filter = lambda wants: handed.append(wants) or real(wants)
        index = e.index
        c.evaluate("pyroscope.ebpf.e")
        assert e.index is index and handed == []
        assert e.index.match(os.getpid(), "").labels["service_name"] == "me"
    finally:
        c.stop()
