"""The agent's HTTP server and the built-in pipeline: metrics, readiness, health, component pages,
the local store of rotated pprof files and its flame graph page; eBPF failure -> unhealthy."""

from __future__ import annotations

import gzip
import sys

import pytest

from hotstack.profile.pprof_pb2 import Profile

from ..conftest import hotstack, wait_for

pytestmark = pytest.mark.root


def test_builtin_pipeline_local_store_and_flame_graph(agent, spin_binary, workloads, tmp_path):
    spinner = workloads([spin_binary])
    workloads([sys.executable, "-c", "while True: pass"])   # for the Python walker's metrics
    store = tmp_path / "store"
    a = agent(None, extra=["--storage.path", str(store)])
    a.wait_ready()
    assert a.get("/-/ready") == (200, "Agent is ready.\n")
    # the built-in pipeline names services after their executable; collect_interval is 15 s
    files = wait_for(lambda: list((store / "alloy-spin").glob("*.pb.gz")) if (store / "alloy-spin").exists() else [],
                     timeout=120, every=0.5)
    assert files, f"no pprof file in {store}: {a.log.read_text()[-2000:]}"
    prof = Profile()
    prof.ParseFromString(gzip.decompress(files[0].read_bytes()))
    names = {prof.string_table[f.name] for f in prof.function}
    assert "hotstack_alloy_spin_leaf" in names
    status, page = a.get("/flamegraph?service_name=alloy-spin&minutes=5")
    assert status == 200 and "hotstack_alloy_spin_leaf" in page and "<option value=\"alloy-spin\" selected>" in page
    tree = a.json("/flamegraph?service_name=alloy-spin&format=json")
    assert tree["v"] > 0 and tree["c"]
    status, index = a.get("/")
    assert status == 200 and "pyroscope.ebpf.default" in index and "/flamegraph" in index
    assert a.get("/-/healthy")[0] == 200
    comps = {c["id"]: c for c in a.json("/api/v0/web/components")}
    assert set(comps) == {"discovery.process.all", "discovery.relabel.services", "pyroscope.ebpf.default",
                          "hotstack.local_store.default"}
    assert all(c["health"]["state"] == "healthy" for c in comps.values()), comps
    status, html = a.get("/component/pyroscope.ebpf.default")
    assert status == 200 and "elf_cache" in html and "pid_cache" in html
    # Alloy's debug info: pid_cache = per process, its ELF symbol tables and their sizes in symbols.
    debug = a.json("/api/v0/web/components/pyroscope.ebpf.default")["debug_info"]
    spin = [p for p in debug["pid_cache"]["processes"] if p["pid"] == spinner.pid]
    assert spin, debug["pid_cache"]
    tables = {t["path"]: t["symbols"] for t in spin[0]["symbol_tables"]}
    assert tables.get(str(spin_binary), 0) > 0, tables   # the executable's own .symtab
    assert spin[0]["symbols"] == sum(tables.values()) > 0
    assert any(f["path"] == str(spin_binary) and f["symbols"] == tables[str(spin_binary)]
               for f in debug["elf_cache"]["files"])
    metrics = a.get("/metrics")[1]
    for name in ("pyroscope_ebpf_active_targets", "pyroscope_ebpf_profiling_sessions_total",
                 "pyroscope_ebpf_pprofs_total", "pyroscope_ebpf_pprof_bytes_total", "hotstack_samples_total",
                 "hotstack_symbolizer_lookups_total", "hotstack_lost_stacks_total",
                 "hotstack_bpf_run_time_seconds_total", "hotstack_kernel_unwinder_total"):
        assert name in metrics, name
    samples = [line for line in metrics.splitlines() if line.startswith("hotstack_samples_total")]
    # the embedded profiler's metrics, each once recorded, with Alloy's scope label: one of each
    # group the seed lists (native unwinding, interpreter unwinding, symbolization, process
    # management, eBPF map state)
    scoped = 'component_id="pyroscope.ebpf.default",component_path="/",otel_scope_name="pyroscope.ebpf"'
    for name in ("UnwindNativeAttempts_total", "UnwindPythonAttempts_total", "ELFInfoCacheMiss_total",
                 "NumProcAttempts_total", "NumExeIDLoadedToEBPF"):
        line = wait_for(lambda: next((ln for ln in a.get("/metrics")[1].splitlines()
                                      if ln.startswith(f"{name}{{{scoped}}} ")), None), timeout=60, every=0.5)
        assert line and float(line.split()[-1]) > 0, (name, a.get("/metrics")[1][-3000:])
    assert float(samples[0].split()[-1]) > 0
    assert a.get("/api/v0/web/components/nope")[0] == 404
    assert a.stop() == 0


def test_ebpf_failure_makes_the_component_unhealthy(agent, tmp_path):
    """Without privileges the eBPF session cannot start: the agent keeps serving and says why."""
    import shutil
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed"
    config = ('pyroscope.write "w" {\n  endpoint {\n    url = "http://127.0.0.1:9"\n  }\n}\n'
              'pyroscope.ebpf "e" {\n  targets = [{"__process_pid__" = "1"}]\n'
              '  forward_to = [pyroscope.write.w.receiver]\n}\n')
    import tempfile
    from pathlib import Path

    from .conftest import AgentProcess
    with tempfile.TemporaryDirectory() as d:   # readable by the unprivileged user, unlike tmp_path
        Path(d).chmod(0o755)
        a = AgentProcess(config, Path(d), prefix=[setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                                                  "--inh-caps=-all", "--bounding-set=-all"])
        try:
            _check_unhealthy(a)
        finally:
            a.stop()


def _check_unhealthy(a) -> None:
    a.wait_ready(timeout=120)
    page = a.json("/api/v0/web/components/pyroscope.ebpf.e")
    assert page["health"]["state"] == "unhealthy"
    assert page["health"]["message"], page
    status, text = a.get("/-/healthy")
    assert status == 500 and "pyroscope.ebpf.e" in text
    assert "pyroscope_ebpf_profiling_sessions_failing_total" in a.get("/metrics")[1]


def test_listen_address_in_use_is_one_line(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = hotstack("agent", "--server.http.listen-addr", f"127.0.0.1:{port}", "--storage.path", str(tmp_path))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr
    r = hotstack("agent", "--server.http.listen-addr", "nonsense")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
