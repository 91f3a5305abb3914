"""Reloads and engine cycles leave nothing behind (issue 47, items 6 and 7): every BPF link,
program, map and perf event an engine opened is closed with it. A link left open keeps its program
attached host-wide (the exec and exit tracepoints ran for every exec of the host), and a closed
engine's metrics must not break a scrape."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from ..alloy.conftest import AgentProcess
from ..conftest import wait_for

pytestmark = pytest.mark.root

KINDS = ("links", "programs", "maps", "perf events")


def bpf_objects(pid: int | str = "self") -> Counter:
    """The BPF objects and perf events process `pid` holds, by kind, from its descriptors' fdinfo
    (a link's names its link_id and its program's prog_id, a program's its prog_id, a map's its map_id)."""
    counts: Counter = Counter()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = f.read()
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:      # closed meanwhile
            continue
        if "\nlink_id:" in info:
            counts["links"] += 1
        elif "\nprog_id:" in info or "\nprog_tag:" in info:
            counts["programs"] += 1
        elif "\nmap_id:" in info or "\nmap_type:" in info:
            counts["maps"] += 1
        elif target == "anon_inode:[perf_event]":
            counts["perf events"] += 1
    return Counter({kind: counts[kind] for kind in KINDS})


@pytest.mark.parametrize("kind", ["cpu", "cpu and off-cpu"])
def test_engine_start_and_close_cycles_leave_nothing_open(workloads, kind):
    """N start/close cycles of the Engine hold what one did: nothing BPF (2 links, the exec and exit
    tracepoints', were left open by each before)."""
    from hotstack.sampling import Engine, EngineConfig

    sleeper = workloads(["sleep", "600"])
    config = EngineConfig(frequency=49, pids=(sleeper.pid,), runtime_frames=False,
                          off_cpu_threshold=1.0 if "off-cpu" in kind else 0.0)

    def cycle() -> Counter:
        with Engine(config):
            running = bpf_objects()
        return running

    before = bpf_objects()
    running = cycle()
    after_one = bpf_objects()
    # (the count sees what a running engine holds: its program's links, programs, maps and events)
    assert running["links"] >= 2 and running["programs"] > 0 and running["maps"] > 0 and running["perf events"] > 0, running
    for _ in range(4):
        cycle()
    after_five = bpf_objects()
    assert after_five == after_one, (before, after_one, after_five)
    assert after_one == before, (before, after_one)


def _config(label: str | None, pid: int, sample_rate: int = 19) -> str:
    """A pyroscope.ebpf component named `label` (None: none) profiling `pid`, collected every second."""
    out = 'pyroscope.write "w" {\n  endpoint {\n    url = "http://127.0.0.1:9"\n  }\n}\n'
    if label is not None:
        out += (f'pyroscope.ebpf "{label}" {{\n  targets = [{{"__process_pid__" = "{pid}"}}]\n'
                f'  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "1s"\n'
                f'  sample_rate = {sample_rate}\n}}\n')
    return out


def _reload(a, config: str, label: str | None) -> None:
    """Write `config` (component `label`, or none), SIGHUP, and wait for it to run (or be gone)."""
    (a.log.parent / "agent.alloy").write_text(config)
    a.proc.send_signal(signal.SIGHUP)

    def applied() -> bool:
        ebpf = {c["id"] for c in a.json("/api/v0/web/components")} - {"pyroscope.write.w"}
        if label is None:
            return not ebpf
        if ebpf != {f"pyroscope.ebpf.{label}"}:
            return False
        page = a.json(f"/api/v0/web/components/pyroscope.ebpf.{label}")
        return page["health"]["state"] == "healthy" and page["health"]["message"].startswith("profiling at")
    assert wait_for(applied, timeout=120), a.log.read_text()[-3000:]


def _scrape(a) -> str:
    status, text = a.get("/metrics")
    assert status == 200, text[-2000:]
    return text


def _walks(a, label: str) -> float:
    """The kernel unwinder's walks (UnwindNativeAttempts) of component pyroscope.ebpf.`label`."""
    for line in _scrape(a).splitlines():
        if line.startswith("UnwindNativeAttempts_total{") and f'component_id="pyroscope.ebpf.{label}"' in line:
            return float(line.split()[-1])
    return 0.0


def test_reloads_that_rename_or_re_add_pyroscope_ebpf_leave_nothing_open(workloads, tmp_path):
    """Each reload that renamed pyroscope.ebpf, or removed it and added it again, left the old
    engine's exec and exit links attached (2 -> 14 after 6 reloads). Now the agent holds after N
    such reloads what it held after one, every scrape answers, and a session restarted by a changed
    argument does not read the closed one: its counters go on from where they were."""
    busy = workloads(["sh", "-c", "while :; do :; done"])
    a = AgentProcess(_config("a", busy.pid), tmp_path)
    try:
        a.wait_ready()
        _reload(a, _config("a", busy.pid), "a")
        walked = wait_for(lambda: _walks(a, "a"), timeout=60)
        assert walked, _scrape(a)[-3000:]
        _reload(a, _config("a", busy.pid, sample_rate=23), "a")     # a new session, the old one closed
        assert _walks(a, "a") >= walked
        _reload(a, _config("b", busy.pid), "b")                     # renamed
        after_one = bpf_objects(a.proc.pid)
        assert after_one["links"] >= 2 and after_one["perf events"] > 0, after_one
        for label in (None, "b", "c", "a", None, "a"):     # removed and added again, renamed
            _reload(a, _config(label, busy.pid), label)
            time.sleep(1.5)                    # (a collect of the new engine: its metrics read too)
            _scrape(a)
        assert wait_for(lambda: _walks(a, "a"), timeout=60)
        after_many = bpf_objects(a.proc.pid)
        assert after_many == after_one, (after_one, after_many)
        assert a.stop() == 0
        assert "Traceback" not in a.log.read_text(), a.log.read_text()[-3000:]
    finally:
        a.stop()


def test_a_scrape_reads_nothing_of_a_closed_engine(workloads):
    """A scrape asked each frame source whether it had stats, which built a source still waiting for
    its runtime's first process: on a closed engine, its walker's tunable was written to a closed
    map (struct.error at every scrape until restart). The engine here profiles a process that runs
    no runtime, so no source is built before it closes; the scrape builds none either."""
    from prometheus_client import CollectorRegistry, generate_latest

    from hotstack.alloy.components.ebpf_metrics import EbpfMetrics
    from hotstack.sampling import Engine, EngineConfig

    sleeper = workloads(["sleep", "600"])
    registry = CollectorRegistry()
    metrics = EbpfMetrics.of(registry)
    engine = Engine(EngineConfig(frequency=49, pids=(sleeper.pid,)))
    with engine:
        for profile in engine.collect():
            metrics.observe_profile(profile, engine, "pyroscope.ebpf.a")
    waiting = [source for source in engine.runtimes if hasattr(type(source), "built")]   # (built when met)
    assert waiting and not any(source.built for source in waiting)
    text = generate_latest(registry).decode()
    assert "hotstack_samples" in text
    assert not any(source.built for source in waiting)
