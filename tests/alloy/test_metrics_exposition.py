"""The agent's /metrics read whole by a real Prometheus text-format parser (prometheus_client's):
every series unique (one pyroscope.write with two endpoints of the same URL, one Pyroscope with
two tenants, as a user writes it), and Alloy's component counters present at 0 from the start,
before anything has counted (alerts on rate() need the series)."""

from __future__ import annotations

import collections
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.root

EBPF = {"component_id": "pyroscope.ebpf.e", "component_path": "/"}
WRITE = {"component_id": "pyroscope.write.w", "component_path": "/"}
# Alloy's counters of the two components, each at 0 before its first increment
ZERO_AT_START = {
    "pyroscope_ebpf_profiling_sessions_failing_total": EBPF,
    "pyroscope_ebpf_pprofs_dropped_total": EBPF,
    "pyroscope_forwarded_entries_total": EBPF,
    "pyroscope_fanout_latency_count": EBPF,
    "pyroscope_write_dropped_profiles_total": WRITE,
    "pyroscope_write_dropped_bytes_total": WRITE,
    "pyroscope_write_retries_total": WRITE,
}


def config(pid: int, url: str) -> str:
    return (f'pyroscope.ebpf "e" {{\n  targets = [{{"__process_pid__" = "{pid}", "service_name" = "spin"}}]\n'
            f'  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "2s"\n}}\n'
            f'pyroscope.write "w" {{\n'
            f'  endpoint {{\n    url = "{url}"\n    headers = {{"X-Scope-OrgID" = "team-a"}}\n  }}\n'
            f'  endpoint {{\n    url = "{url}"\n    headers = {{"X-Scope-OrgID" = "team-b"}}\n  }}\n}}\n')


def series(text: str) -> dict[tuple, float]:
    """Every sample of the exposition by (name, labels), asserting none appears twice."""
    seen: collections.Counter = collections.Counter()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            seen[key] += 1
            values[key] = s.value
    dups = [k for k, n in seen.items() if n > 1]
    assert not dups, f"duplicate series: {dups}"
    return values


def value(values: dict, name: str, **labels: str) -> float | None:
    for (n, ls), v in values.items():
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items()):
            return v
    return None


def test_every_series_unique_and_counters_at_zero_from_start(agent, pyroscope, spin_binary, workloads):
    spin = workloads([spin_binary])
    a = agent(config(spin.pid, pyroscope.url))
    a.wait_ready()
    start = series(a.get("/metrics")[1])
    missing = {name: value(start, name, **labels) for name, labels in ZERO_AT_START.items()}
    assert all(v == 0 for v in missing.values()), missing
    # both tenants get the spin workload's profiles; the two endpoints' series stay one each
    tenants = lambda: {s.headers.get("X-Scope-OrgID") for s in pyroscope.series}   # noqa: E731
    deadline = time.monotonic() + 60
    while tenants() != {"team-a", "team-b"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tenants() == {"team-a", "team-b"}, a.log.read_text()[-2000:]
    time.sleep(0.5)
    after = series(a.get("/metrics")[1])
    sent = value(after, "pyroscope_write_sent_profiles_total", **WRITE, endpoint=pyroscope.url)
    assert sent is not None and sent >= 2, after
    assert value(after, "pyroscope_ebpf_profiling_sessions_total", **EBPF) == 1
    assert value(after, "pyroscope_ebpf_profiling_sessions_failing_total", **EBPF) == 0
    # the embedded profiler's, with its scope: the spin workload's walks reach its root by a stop row
    scoped = {**EBPF, "otel_scope_name": "pyroscope.ebpf"}
    assert (value(after, "UnwindNativeStackDeltaStop_total", **scoped) or 0) > 0, sorted(n for n, _ in after)
    assert a.stop() == 0


def test_readme_lists_every_mapped_profiler_metric():
    """Every embedded-profiler metric hotstack exports is in the table of them that the README links to
    (docs/agent-metrics.md)."""
    from pathlib import Path

    from hotstack.alloy.components.ebpf_metrics import PROFILER_METRICS
    root = Path(__file__).parents[2]
    assert "(docs/agent-metrics.md)" in (root / "README.md").read_text()
    page = (root / "docs" / "agent-metrics.md").read_text()
    table = page[page.index("| group | metrics (counters end in `_total`) |"):page.index("Not applicable (no counterpart")]
    missing = [name for name, *_ in PROFILER_METRICS if f"`{name}`" not in table]
    assert not missing, missing


def test_the_metrics_page_lists_every_metric_a_scrape_shows(agent, pyroscope, spin_binary, workloads):
    """docs/agent-metrics.md names every metric of a running agent's /metrics (read by the parser,
    after the first push, so that the series that appear with a profile are there)."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "agent-metrics.md").read_text()
    spin = workloads([spin_binary])
    a = agent(config(spin.pid, pyroscope.url))
    a.wait_ready()
    deadline = time.monotonic() + 60
    while not pyroscope.series and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pyroscope.series, a.log.read_text()[-2000:]
    families = {f.name: f.type for f in text_string_to_metric_families(a.get("/metrics")[1])}
    assert {"hotstack_samples", "pyroscope_ebpf_pprofs", "pyroscope_write_sent_profiles"} <= families.keys(), families
    # (the parser names a counter's family without its series' `_total`)
    missing = sorted(name for name, kind in families.items()
                     if f"`{name}`" not in page and not (kind == "counter" and f"`{name}_total`" in page))
    assert not missing, missing
    assert a.stop() == 0
