"""Prometheus metrics of pyroscope.ebpf (names as Alloy's) and of the engine behind it."""

from __future__ import annotations

import threading
import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...runtimes.common.files import RUNTIME_NAMES, UNREAD

_BY_REGISTRY: "weakref.WeakKeyDictionary[CollectorRegistry, EbpfMetrics]" = weakref.WeakKeyDictionary()


class EngineCollector:
    """Engine counters read at scrape time from the live profilers (never stale, no double counting)."""

    def __init__(self) -> None:
        self.profilers: "weakref.WeakSet" = weakref.WeakSet()
        # what the profilers closed so far counted (retire): lookups hit, missed, BPF run time
        self._retired = [0, 0, 0.0]
        self._retired_lock = threading.Lock()
        self.samples = 0
        self.user_lost = 0
        self.kernel_lost = 0
        self.counts_full = 0
        self.truncated = 0
        self.native = {"incomplete": 0, "no_table": 0, "fp_frames": 0}   # --unwind kernel

    def retire(self, profiler) -> None:
        """A profiler about to close: what it counted is kept, and it is read no more."""
        h, m, rt = _lookups_and_run_time(profiler)
        with self._retired_lock:
            self.profilers.discard(profiler)
            self._retired[0] += h
            self._retired[1] += m
            self._retired[2] += rt

    def collect(self):
        samples = CounterMetricFamily("hotstack_samples", "Samples taken by the BPF sampler.")
        samples.add_metric([], self.samples)
        lost = CounterMetricFamily("hotstack_lost_stacks", "Samples kept without a stack.", labels=["stack"])
        lost.add_metric(["user"], self.user_lost)
        lost.add_metric(["kernel"], self.kernel_lost)
        full = CounterMetricFamily("hotstack_dropped_samples", "Samples dropped: aggregation map full.")
        full.add_metric([], self.counts_full)
        truncated = CounterMetricFamily("hotstack_truncated_stacks",
                                        "Samples whose stack (native, or a runtime's such as Python's) was cut short: a [truncated] frame.")
        truncated.add_metric([], self.truncated)
        native = CounterMetricFamily("hotstack_kernel_unwinder", "The kernel unwinder's shortfalls: stacks short of "
                                     "the root, PCs in files not loaded yet, frames by frame pointers.", labels=["what"])
        for what, value in self.native.items():
            native.add_metric([what], value)
        hits = CounterMetricFamily("hotstack_symbolizer_lookups", "Symbol lookups by result.", labels=["result"])
        runtime = CounterMetricFamily("hotstack_bpf_run_time_seconds", "Run time of the BPF sampler program.")
        # frame sources with stats() (runtimes/v8): processes attached, frames read, read errors
        sources = GaugeMetricFamily("hotstack_runtime_processes", "Processes a runtime's frame source walks.",
                                    labels=["runtime"])
        source_counts = CounterMetricFamily("hotstack_runtime_events", "A runtime's frame source: frames the "
                                            "kernel recorded, functions named, memory reads that failed.",
                                            labels=["runtime", "what"])
        with self._retired_lock:
            h, m, rt = self._retired
            profilers = [p for p in self.profilers if not _closed(p)]
        caches: dict[str, int] = {}
        per_source: dict[str, dict[str, int]] = {}
        for p in profilers:
            ph, pm, prt = _lookups_and_run_time(p)
            h, m, rt = h + ph, m + pm, rt + prt
            for k, v in p.symbolizer.metrics().items():
                if k.startswith(("elf_cache", "pid_cache")):
                    caches[k] = caches.get(k, 0) + v
            for source in built_sources(p):
                stats = source.stats()
                if stats:        # (a source that keeps none: CPython's)
                    total = per_source.setdefault(source.name, {})
                    for what, value in stats.items():
                        total[what] = total.get(what, 0) + value
        for name, st in sorted(per_source.items()):
            sources.add_metric([name], st.pop("processes", 0))
            for what, value in sorted(st.items()):
                source_counts.add_metric([name, what], value)
        hits.add_metric(["hit"], h)
        hits.add_metric(["miss"], m)
        runtime.add_metric([], rt)
        unread = CounterMetricFamily("hotstack_runtime_processes_unread", "Processes of a runtime hotstack "
                                     "recognized and could not read (its version or build): no runtime frames; "
                                     "`hotstack doctor --pid PID` says why.", labels=["runtime"])
        partly = CounterMetricFamily("hotstack_runtime_processes_partly_read", "Processes of a runtime hotstack "
                                     "read in part: frames named, some without their line (JDK 8's compiled "
                                     "loops); `hotstack doctor --pid PID` says why.", labels=["runtime"])
        for name in RUNTIME_NAMES:
            unread.add_metric([name], UNREAD.counts.get(name, 0))
            partly.add_metric([name], UNREAD.partly.get(name, 0))
        failed = CounterMetricFamily("hotstack_engine_failures", "Failures inside the engine, by where: a "
                                     "background thread that raised (logged and restarted; five of one end the "
                                     "session), a frame source that raised on a process (logged).",
                                     labels=["where"])
        failures: dict[str, int] = {}
        for p in list(self.profilers):
            for name, count in getattr(p, "failures", {}).items():
                failures[name] = failures.get(name, 0) + count
        for name, count in sorted(failures.items()):
            failed.add_metric([name], count)
        held = GaugeMetricFamily("hotstack_held_files", "Files of processes in their own root (or deleted) held "
                                 "open now, to name their frames after the processes exit.")
        not_held = CounterMetricFamily("hotstack_files_not_held", "Files of such processes not held: past the "
                                       "bound of held files, or gone before they could be opened.", labels=["why"])
        counts = [0, 0, 0]
        for p in profilers:
            table = getattr(getattr(p, "processes", None), "held", None)
            if table is not None:
                counts[0] += len(table)
                counts[1] += table.refused
                counts[2] += table.failed
        held.add_metric([], counts[0])
        not_held.add_metric(["bound"], counts[1])
        not_held.add_metric(["gone"], counts[2])
        yield from (samples, lost, full, truncated, native, hits, runtime, sources, source_counts, unread, partly, failed, held,
                    not_held)
        for k, v in sorted(caches.items()):
            g = GaugeMetricFamily(f"hotstack_symbolizer_{k}", f"Symbolizer {k.replace('_', ' ')}.")
            g.add_metric([], v)
            yield g


def built_sources(profiler) -> list:
    """The profiler's frame sources that were built (a runtime met on the host). A source that
    waits for its runtime's first process is not built by a read of its metrics: built after its
    engine closed, it set its walker's tunable in a map already closed (struct.error at every
    scrape), and built on a live engine, it was work for a runtime the host does not run."""
    out = []
    for source in getattr(profiler, "runtimes", ()):
        built = source.built if hasattr(type(source), "built") else source
        if built is not None:
            out.append(built)
    return out


def _closed(profiler) -> bool:
    """Whether a profiler was closed (its maps are gone: nothing of it is read)."""
    return bool(getattr(profiler, "closed", False))


def _lookups_and_run_time(profiler) -> tuple[int, int, float]:
    """(symbol lookups hit, missed, seconds the CPU sampler's program ran) of a profiler."""
    stats = profiler.symbolizer.stats
    try:
        run_time = profiler.bpf_run_time_ns() / 1e9
    except Exception:   # the session closing under the scrape: its program's time is not read
        run_time = 0.0
    return stats.hits, stats.misses, run_time


# The embedded profiler's own metrics, as Alloy exposes those of opentelemetry-ebpf-profiler (an
# OTel meter named "pyroscope.ebpf", hence the otel_scope_name label; counters get `_total`). Only
# names whose meaning hotstack's counters share are given, each from where hotstack counts it:
#   (name, kind, help, read(profiler) -> number or None)
def _kernel_counter(name: str):
    def read(profiler):
        total = 0
        for sampler in getattr(profiler, "samplers", ()):
            native = getattr(sampler, "native", None)
            if native is not None:
                total += native.kernel_counters().get(name, 0)
        return total
    return read


def _elf_cache(field_: str):
    def read(profiler):
        cache = getattr(getattr(profiler, "symbolizer", None), "elf_cache", None)
        return getattr(cache.stats, field_) if cache is not None else 0
    return read


def _processes(field_: str):
    def read(profiler):
        return getattr(getattr(profiler, "processes", None), field_, 0)
    return read


def _exes_loaded(profiler):
    total = 0
    for sampler in getattr(profiler, "samplers", ()):
        native = getattr(sampler, "native", None)
        if native is not None:
            total += len(native.loaded)
    return total


_PY_TOTALS: "weakref.WeakKeyDictionary[object, list[int]]" = weakref.WeakKeyDictionary()
_PY_LOCK = threading.Lock()


def _python_counter(index_name: str):
    """A counter of the kernel's Python walker (bpf/schema.yaml py_stat). The source hands out
    deltas and nothing else reads them, so their running totals are kept here."""
    def read(profiler):
        from ...bpf import schema
        total = 0
        for source in built_sources(profiler):
            if source.name != "python":
                continue
            with _PY_LOCK:
                totals = _PY_TOTALS.setdefault(source, [0] * schema.PY_STAT_MAX)
                for i, delta in enumerate(source.counters()):
                    totals[i] += delta
                total += totals[getattr(schema, index_name)]
        return total
    return read


def _runtime_stat(runtime: str, name: str):
    """A counter of an interpreter source's stats() (runtimes/ruby, runtimes/perl), summed over profilers' sources."""
    def read(profiler) -> int:
        return sum(source.stats()[name] for source in built_sources(profiler)
                   if source.name == runtime)
    return read


def _v8_frames(profiler):
    return sum(source.stats()["frames"] for source in built_sources(profiler)
               if source.name == "v8")


PROFILER_METRICS = [
    # native unwinding: the kernel unwinder's walks (--unwind kernel, the default)
    ("UnwindNativeAttempts", "counter", "Unwind attempts",
     _kernel_counter("walks")),
    ("UnwindNativeFrames", "counter", "Unwound frames", _kernel_counter("frames")),
    ("UnwindNativeErrWrongTextSection", "counter", "Number of PCs met in an executable whose unwind table was "
     "not loaded in eBPF", _kernel_counter("no_table")),
    ("UnwindErrStackLengthExceeded", "counter", "Number of times the frame limit was reached",
     _kernel_counter("end_truncated")),
    ("UnwindNativeStackDeltaStop", "counter", "Number of stop stack deltas in the native unwinder (success)",
     _kernel_counter("end_root")),
    ("UnwindErrZeroPC", "counter", "Number of walks ended by a return address of 0", _kernel_counter("end_zero")),
    ("UnwindNativeErrPCRead", "counter", "Number of walks ended by a stack read that faulted",
     _kernel_counter("end_read")),
    ("UnwindNativeErrStackDeltaInvalid", "counter", "Number of walks ended by a rule that cannot be evaluated "
     "(and no frame pointer)", _kernel_counter("end_invalid")),
    # interpreter unwinding: the kernel walkers of runtimes/python and runtimes/v8
    ("UnwindPythonAttempts", "counter", "Number of attempted python unwinds", _python_counter("PY_STAT_WALKS")),
    ("UnwindPythonErrZeroThreadState", "counter", "Number of PyThreadState being 0x0",
     _python_counter("PY_STAT_NO_THREAD")),
    ("UnwindPythonCodeCopies", "counter", "Number of Python code objects the kernel walker copied for naming "
     "(a process that exits keeps its names)", _python_counter("PY_STAT_SNAPS")),
    ("UnwindPythonErrCodeCopiesLost", "counter", "Number of Python code objects not copied: the ring was full "
     "(read from the process, if it still runs)", _python_counter("PY_STAT_SNAPS_LOST")),
    ("UnwindV8Frames", "counter", "Number of unwound V8 frames", _v8_frames),
    ("UnwindRubyAttempts", "counter", "Number of attempted Ruby unwinds", _runtime_stat("ruby", "walks")),
    ("UnwindRubyErrNoProcInfo", "counter", "Number of Ruby threads without an execution context",
     _runtime_stat("ruby", "no_ec")),
    ("UnwindPHPAttempts", "counter", "Number of attempted PHP unwinds", _runtime_stat("php", "walks")),
    ("UnwindPerlAttempts", "counter", "Number of attempted perl unwinds", _runtime_stat("perl", "walks")),
    ("UnwindPerlTLS", "counter", "Number of Perl threads whose interpreter could not be found",
     _runtime_stat("perl", "no_interpreter")),
    # symbolization
    ("ELFInfoCacheHit", "counter", "Number of cache hits for ELF information", _elf_cache("hits")),
    ("ELFInfoCacheMiss", "counter", "Number of cache misses for ELF information", _elf_cache("misses")),
    # process management
    ("NumProcAttempts", "counter", "Number of /proc/PID/maps process attempts", _processes("maps_reads")),
    ("ErrProcNotExist", "counter", "Number of times reading /proc/<PID> as it does not exist anymore",
     _processes("maps_gone")),
    # eBPF map state
    ("NumExeIDLoadedToEBPF", "gauge", "The number of executables loaded to eBPF maps", _exes_loaded),
]
SCOPE = "pyroscope.ebpf"
_COUNTERS = {name for name, kind, _help, _read in PROFILER_METRICS if kind == "counter"}


class ProfilerMetricsCollector:
    """PROFILER_METRICS of the live profilers, per component; as in Alloy, a metric appears only
    once it has been recorded (a non-zero value seen), so not every name shows on every host."""

    def __init__(self) -> None:
        self.profilers: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()  # -> component id
        self.seen: set[str] = set()
        self._lock = threading.Lock()
        self._gone: dict[tuple[str, str], float] = {}   # counters of profilers closed since (kept, never lowered)

    def add(self, profiler, component_id: str) -> None:
        self.profilers[profiler] = component_id

    def retire(self, profiler) -> None:
        """A profiler about to close: its counters' last values are kept for its component (a
        restarted session's counters go on from them, never lower), and it is read no more."""
        with self._lock:
            comp = self.profilers.pop(profiler, None)
            if comp is None:
                return
            for (name, _comp), v in self._read(profiler, comp).items():
                if name in _COUNTERS:      # (a gauge of a closed session is gone with it)
                    self._gone[(name, comp)] = self._gone.get((name, comp), 0) + v

    @staticmethod
    def _read(profiler, comp: str) -> dict[tuple[str, str], float]:
        values: dict[tuple[str, str], float] = {}
        for name, _kind, _help, read in PROFILER_METRICS:
            try:
                values[(name, comp)] = read(profiler) or 0
            except Exception:   # a session closing under the scrape: skip it this time
                continue
        return values

    def collect(self):
        with self._lock:
            values = dict(self._gone)
            live = [(p, comp) for p, comp in self.profilers.items() if not _closed(p)]
        for profiler, comp in live:
            for key, v in self._read(profiler, comp).items():
                values[key] = values.get(key, 0) + v
        with self._lock:
            for name, kind, help_, _read in PROFILER_METRICS:
                rows = {c: v for (n, c), v in values.items() if n == name}
                if any(rows.values()):
                    self.seen.add(name)
                if name not in self.seen:
                    continue
                fam = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                    name, help_, labels=["component_id", "component_path", "otel_scope_name"])
                for comp, v in sorted(rows.items()):
                    fam.add_metric([comp, "/", SCOPE], v)
                yield fam


class EbpfMetrics:
    """pyroscope.ebpf's metrics with Alloy's names and labels (component_id and component_path, as
    Alloy's component registerer adds them), the fan-out's, the embedded profiler's and hotstack's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        comp = ["component_id", "component_path"]
        self.active_targets = Gauge("pyroscope_ebpf_active_targets",
                                    "Current number of active targets being tracked by the ebpf component",
                                    comp, registry=r)
        self.sessions = Counter("pyroscope_ebpf_profiling_sessions",
                                "Total number of profiling sessions started by the ebpf component", comp, registry=r)
        self.sessions_failing = Counter("pyroscope_ebpf_profiling_sessions_failing",
                                        "Total number of profiling sessions failed to complete by the ebpf component",
                                        comp, registry=r)
        self.pprofs = Counter("pyroscope_ebpf_pprofs", "Total number of pprof profiles collected by the ebpf component",
                              [*comp, "service_name"], registry=r)
        self.pprof_bytes = Counter("pyroscope_ebpf_pprof_bytes", "Bytes of pprof profiles collected by the ebpf "
                                   "component", [*comp, "service_name"], registry=r)
        self.pprof_samples = Counter("pyroscope_ebpf_pprof_samples", "Samples in pprof profiles collected by the "
                                     "ebpf component", [*comp, "service_name"], registry=r)
        self.pprofs_dropped = Counter("pyroscope_ebpf_pprofs_dropped",
                                      "Total number of pprof profiles dropped by the ebpf component", comp, registry=r)
        # Alloy's fan-out to forward_to: the time of one Append to every receiver, and the
        # profiles every receiver took.
        self.fanout_latency = Histogram("pyroscope_fanout_latency", "Write latency for sending to pyroscope profiles",
                                        comp, registry=r)
        self.forwarded = Counter("pyroscope_forwarded_entries", "Total number of samples sent to downstream components.",
                                 comp, registry=r)
        self.engine = EngineCollector()
        r.register(self.engine)
        self.profiler = ProfilerMetricsCollector()
        r.register(self.profiler)

    def start_component(self, component_id: str) -> None:
        """A component's counters at 0 from its start, as Alloy exports them (a rate() needs the
        series before the first increment). Those by service_name appear with their first target."""
        labels = (component_id, "/")
        for counter in (self.sessions, self.sessions_failing, self.pprofs_dropped, self.forwarded):
            counter.labels(*labels)
        self.fanout_latency.labels(*labels)

    @classmethod
    def of(cls, registry: CollectorRegistry | None) -> "EbpfMetrics":
        registry = registry if registry is not None else CollectorRegistry()
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found

    def retire(self, profiler) -> None:
        """`profiler` is about to close: its counts are kept, and a scrape reads it no more."""
        self.engine.retire(profiler)
        self.profiler.retire(profiler)

    def observe_profile(self, profile, profiler, component_id: str = "") -> None:
        self.engine.profilers.add(profiler)
        if component_id:
            self.profiler.add(profiler, component_id)
        st = profile.stats
        self.engine.samples += st.samples
        self.engine.user_lost += st.user_stacks_lost
        self.engine.kernel_lost += st.kernel_stacks_lost
        self.engine.counts_full += st.counts_full
        self.engine.truncated += st.truncated
        self.engine.native["incomplete"] += st.native_incomplete
        self.engine.native["no_table"] += st.native_no_table
        self.engine.native["fp_frames"] += st.native_fp_frames
