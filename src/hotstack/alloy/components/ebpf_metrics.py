"""Prometheus metrics of pyroscope.ebpf (names as Alloy's) and of the engine behind it."""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_BY_REGISTRY: "weakref.WeakKeyDictionary[CollectorRegistry, EbpfMetrics]" = weakref.WeakKeyDictionary()


class EngineCollector:
    """Engine counters read at scrape time from the live profilers (never stale, no double counting)."""

    def __init__(self) -> None:
        self.profilers: "weakref.WeakSet" = weakref.WeakSet()
        self.samples = 0
        self.user_lost = 0
        self.kernel_lost = 0
        self.counts_full = 0
        self.truncated = 0
        self.native = {"incomplete": 0, "no_table": 0, "fp_frames": 0}   # --unwind kernel

    def collect(self):
        samples = CounterMetricFamily("hotstack_samples", "Samples taken by the BPF sampler.")
        samples.add_metric([], self.samples)
        lost = CounterMetricFamily("hotstack_lost_stacks", "Samples kept without a stack.", labels=["stack"])
        lost.add_metric(["user"], self.user_lost)
        lost.add_metric(["kernel"], self.kernel_lost)
        full = CounterMetricFamily("hotstack_dropped_samples", "Samples dropped: aggregation map full.")
        full.add_metric([], self.counts_full)
        truncated = CounterMetricFamily("hotstack_truncated_stacks",
                                        "Samples whose runtime (e.g. Python) stack was cut short: a [truncated] frame.")
        truncated.add_metric([], self.truncated)
        native = CounterMetricFamily("hotstack_kernel_unwinder", "The kernel unwinder's shortfalls: stacks short of "
                                     "the root, PCs in files not loaded yet, frames by frame pointers.", labels=["what"])
        for what, value in self.native.items():
            native.add_metric([what], value)
        hits = CounterMetricFamily("hotstack_symbolizer_lookups", "Symbol lookups by result.", labels=["result"])
        runtime = CounterMetricFamily("hotstack_bpf_run_time_seconds", "Run time of the BPF sampler program.")
        h = m = 0
        rt = 0.0
        caches: dict[str, int] = {}
        for p in list(self.profilers):
            stats = p.symbolizer.stats
            h += stats.hits
            m += stats.misses
            for k, v in p.symbolizer.metrics().items():
                if k.startswith(("elf_cache", "pid_cache")):
                    caches[k] = caches.get(k, 0) + v
            try:
                rt += p.bpf_run_time_ns() / 1e9   # the CPU sampler's program
            except Exception:   # the session may be closing; skip it this scrape
                pass
        hits.add_metric(["hit"], h)
        hits.add_metric(["miss"], m)
        runtime.add_metric([], rt)
        yield from (samples, lost, full, truncated, native, hits, runtime)
        for k, v in sorted(caches.items()):
            g = GaugeMetricFamily(f"hotstack_symbolizer_{k}", f"Symbolizer {k.replace('_', ' ')}.")
            g.add_metric([], v)
            yield g


class EbpfMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.active_targets = Gauge("pyroscope_ebpf_active_targets", "Targets the component tracks.",
                                    ["component"], registry=r)
        self.sessions = Counter("pyroscope_ebpf_profiling_sessions", "Profiling sessions started.",
                                ["component"], registry=r)
        self.sessions_failing = Counter("pyroscope_ebpf_profiling_sessions_failing",
                                        "Profiling sessions that failed to start.", ["component"], registry=r)
        self.pprofs = Counter("pyroscope_ebpf_pprofs", "pprof profiles collected.", ["service_name"], registry=r)
        self.pprof_bytes = Counter("pyroscope_ebpf_pprof_bytes", "Bytes of pprof profiles collected.",
                                   ["service_name"], registry=r)
        self.pprof_samples = Counter("pyroscope_ebpf_pprof_samples", "Samples in pprof profiles collected.",
                                     ["service_name"], registry=r)
        self.pprofs_dropped = Counter("pyroscope_ebpf_pprofs_dropped", "pprof profiles a receiver dropped.",
                                      ["component"], registry=r)
        self.engine = EngineCollector()
        r.register(self.engine)

    @classmethod
    def of(cls, registry: CollectorRegistry | None) -> "EbpfMetrics":
        registry = registry if registry is not None else CollectorRegistry()
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found

    def observe_profile(self, profile, profiler) -> None:
        self.engine.profilers.add(profiler)
        st = profile.stats
        self.engine.samples += st.samples
        self.engine.user_lost += st.user_stacks_lost
        self.engine.kernel_lost += st.kernel_stacks_lost
        self.engine.counts_full += st.counts_full
        self.engine.truncated += st.truncated
        self.engine.native["incomplete"] += st.native_incomplete
        self.engine.native["no_table"] += st.native_no_table
        self.engine.native["fp_frames"] += st.native_fp_frames
