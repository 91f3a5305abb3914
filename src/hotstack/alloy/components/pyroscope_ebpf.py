"""pyroscope.ebpf: sample every CPU, attribute samples to targets, forward one pprof per
target and pid every collect_interval.

The BPF sampler sees every process; matching happens here in userspace: a sample's pid is
looked up in the pid targets first, then its process's container id in the container
targets. Samples of processes that match nothing are dropped (unless targets_only=false).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass

from ... import __version__, malloc
from ...errors import EngineFailed, HotstackError
from ...profile import transforms
from ...profile.model import Profile, Sample
from ..component import Component, register
from . import ebpf_args, verbose
from .ebpf_metrics import EbpfMetrics, built_sources
from .targets import container_id_of_target, infer_service_name, pid_of_target

SCOPE_NAME = "com.grafana.alloy/pyroscope.ebpf"
STOP_TIMEOUT_S = 60.0
DEFAULT_TARGET = {"service_name": "ebpf/unspecified"}
# Arguments the running samplers were built from: a change restarts them.
ENGINE_ARGS = ("sample_rate", "kernel_frames", "demangle", "python_enabled", "v8_enabled", "off_cpu_threshold",
               "probe_links", "u_probe_links", "obi_process_context_enabled", "bpf_fs_root", "go_enabled",
               "no_kernel_version_check")
ENGINE_ARGS += ("ruby_enabled", "php_enabled", "hotspot_enabled", "perl_enabled", "targets_only")


@dataclass(frozen=True)
class ResolvedTarget:
    key: tuple                  # identity of the label set
    labels: dict[str, str]      # the series labels (with __name__, service_name, scope ...)


def series_labels(target: dict[str, str], pid: int | None = None, container_id: str = "",
                  profile_name: str = "process_cpu") -> dict[str, str]:
    """The labels pyroscope.ebpf puts on a target's profiles (research notes §1)."""
    labels = {k: v for k, v in target.items() if not k.startswith("__") or k == "__name__"}
    if not labels.get("service_name"):
        labels["service_name"] = infer_service_name(target)
    if container_id:
        labels["__container_id__"] = container_id
    elif pid is not None:
        labels["__process_pid__"] = str(pid)
    labels["__name__"] = profile_name
    if "otel.scope.name" not in labels:
        labels["otel.scope.name"] = SCOPE_NAME
    if labels["otel.scope.name"] == SCOPE_NAME and "otel.scope.version" not in labels and __version__ not in (
            "", "v0.0.0"):
        labels["otel.scope.version"] = __version__
    return labels


class TargetIndex:
    """pid -> target and container id -> target, built from the `targets` argument."""

    def __init__(self, targets: list[dict[str, str]]) -> None:
        self.by_pid: dict[int, ResolvedTarget] = {}
        self.by_container: dict[str, ResolvedTarget] = {}
        for t in targets:
            pid = pid_of_target(t)
            if pid is not None:
                labels = series_labels(t, pid=pid)
                self.by_pid[pid] = ResolvedTarget(tuple(sorted(labels.items())), labels)
                continue
            cid = container_id_of_target(t)
            if cid:
                labels = series_labels(t, container_id=cid)
                self.by_container[cid] = ResolvedTarget(tuple(sorted(labels.items())), labels)

    def __len__(self) -> int:
        return len(self.by_pid) + len(self.by_container)

    def match(self, pid: int, container_id: str) -> ResolvedTarget | None:
        found = self.by_pid.get(pid)
        if found is None and container_id:
            found = self.by_container.get(container_id)
        return found


_DEFAULT = ResolvedTarget(("default",), series_labels(DEFAULT_TARGET))


def release_closed_sessions() -> None:
    """Free the engines closed so far, and give their memory back, before a session starts. An
    engine's parts refer to each other (its process table calls back into it), so only the
    collector of cycles frees one, when its oldest generation is next collected: without this each
    reload adds ~5 MB of RSS until one comes (30 MB over six reloads, bench/reload_soak.py)."""
    gc.collect()
    malloc.trim()


@register
class PyroscopeEbpf(Component):
    name = "pyroscope.ebpf"
    schema = ebpf_args.SCHEMA
    initial_exports: dict = {}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self.index = TargetIndex([])
        self.profiler = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._flush_lock = threading.Lock()
        self._starting = False     # a session is being started (it takes seconds): start it once
        self.metrics = EbpfMetrics.of(controller.metrics_registry)
        self.metrics.start_component(self.id)
        self.last_error = ""
        self.pprofs_sent = 0

    # -- configuration --------------------------------------------------------------------------
    def update(self, args: dict) -> None:
        if self._started and args == self.args and (self.profiler is not None or not self._should_run()):
            # Re-evaluated because something upstream changed (discovery.process republishes when
            # any process of the host comes or goes), not what it reads: nothing to redo (a session
            # that failed to start is still tried again).
            return
        index = TargetIndex(args["targets"])
        with self._lock:
            restart = self._started and self.profiler is not None and any(
                args[k] != self.args.get(k) for k in ENGINE_ARGS)
            self.args, self.index = args, index
        self.metrics.active_targets.labels(self.id, "/").set(len(args["targets"]))
        verbose.set_verbose(self, self.log, args["verbose_mode"])
        self.log.debug("%s: %d targets: %d by pid, %d by container id, %d by neither (never matched)", self.id,
                       len(args["targets"]), len(index.by_pid), len(index.by_container),
                       len(args["targets"]) - len(index))
        engine = self.profiler
        if engine is not None:
            engine.set_target_filter(self._keep_pid(index, engine) if args["targets_only"] else None)
            engine.set_kernel_pids(self._kernel_pids(index, args))
        del engine      # (a restart frees the engine it closes before the next starts)
        if restart:
            self._restart_profiler()
        elif self._started and self.profiler is None and self._should_run() and not self._starting:
            self._start_profiler()

    def _should_run(self) -> bool:
        return not self.args["lazy_mode"] or len(self.index) > 0

    # -- the engine -------------------------------------------------------------------------------
    def _make_engine(self):
        from ...sampling.engine import Engine
        return Engine(ebpf_args.engine_config(self.args))

    def _start_profiler(self) -> None:
        """Start the eBPF session; failing to start makes the component unhealthy (tried 3 times)."""
        self._starting = True
        try:
            self._start_attempts()
        finally:
            self._starting = False

    def _start_attempts(self) -> None:
        release_closed_sessions()
        self.metrics.sessions.labels(self.id, "/").inc()
        error = ""
        for attempt in range(3):
            try:
                profiler = self._make_engine()
                profiler.set_target_filter(self._keep_pid(self.index, profiler) if self.args["targets_only"] else None)
                profiler.set_kernel_pids(self._kernel_pids(self.index, self.args))
                profiler.start()
            except HotstackError as e:
                error = str(e)
            else:
                self.profiler = profiler
                self.set_health("healthy", f"profiling at {self.args['sample_rate']} Hz")
                self.log.debug("%s: session started: %s", self.id,
                               ", ".join(f"{s.profile_name} ({s.object_name})" for s in profiler.samplers))
                return
            self.log.debug("%s: session start %d of 3 failed: %s", self.id, attempt + 1, error)
            if attempt < 2 and self._stop.wait(0.2 * (attempt + 1)):
                break
        self.metrics.sessions_failing.labels(self.id, "/").inc()
        self.last_error = error
        self.set_health("unhealthy", error)

    def _restart_profiler(self) -> None:
        old, self.profiler = self.profiler, None
        if old is not None:
            self._flush(old)
            self._close(old)
        del old        # (freed before the next session starts: release_closed_sessions)
        self._start_profiler()

    def start(self) -> None:
        if self.args["obi_process_context_enabled"] and not ebpf_args.OBI_AVAILABLE():
            self.log.warning("%s: obi_process_context_enabled: not supported yet; samples carry no trace_id/span_id",
                             self.id)
        for warning in ebpf_args.start_warnings(self.args):
            self.log.warning("%s: %s", self.id, warning)
        self._started = True
        if self._should_run():
            self._start_profiler()
        else:
            self.set_health("healthy", "lazy_mode: waiting for targets")
        self._thread = threading.Thread(target=self._loop, name=f"hotstack-{self.id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic() + self.args["collect_interval"]
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.args["collect_interval"]
            if next_at < time.monotonic():     # we fell behind (e.g. suspended): don't burst
                next_at = time.monotonic() + self.args["collect_interval"]
            self._flush_safely()
        self._flush_safely()   # on stop: the last partial interval is not lost

    def _flush_safely(self) -> None:
        profiler = self.profiler
        if profiler is not None:
            try:
                self._flush(profiler)
            except EngineFailed as e:     # the session cannot go on: a new one, as after a failed start
                self.log.error("%s: session failed: %s; starting a new one", self.id, e)
                self.metrics.sessions_failing.labels(self.id, "/").inc()
                self.set_health("unhealthy", str(e))
                self._restart_profiler()
            except Exception as e:   # one bad interval must not end profiling
                self.log.exception("%s: collect failed: %s", self.id, e)

    def _flush(self, profiler) -> None:
        with self._lock:
            index, args = self.index, self.args
        with self._flush_lock:   # the loop and a restart may both flush: one drain at a time
            profiles = profiler.collect()
        items = []
        for profile in profiles:
            self.metrics.observe_profile(profile, profiler, self.id)
            encoded = [self._encode(labels, sub, args) for labels, sub in self.split(profile, index, args)]
            items.extend(encoded)
            if self.log.isEnabledFor(logging.DEBUG):
                self._debug_matched(profile, encoded)
        if items:
            self._send(items, args)

    def _debug_matched(self, profile: Profile, encoded: list) -> None:
        matched = sum(len(sub.samples) for _labels, _raw, sub in encoded)
        services = sorted({labels.get("service_name", "") for labels, _raw, _sub in encoded})
        self.log.debug("%s: %s: %d stacks, %d matched to targets (%s), %d of no target dropped", self.id,
                       profile.name, len(profile.samples), matched, ", ".join(services) or "none",
                       len(profile.samples) - matched)

    @staticmethod
    def _kernel_pids(index: TargetIndex, args: dict) -> set[int] | None:
        """The pids the programs sample: with targets_only and targets by pid alone, only theirs,
        so that the rest of the host costs one map lookup per sample (no unwinding, no process
        reads, no unwind tables). Targets by container id take any pid of the container: every pid."""
        if not args["targets_only"] or index.by_container:
            return None
        return set(index.by_pid)

    @staticmethod
    def _keep_pid(index: TargetIndex, profiler):
        """pid -> does a target want it (by pid, else by its container id)."""
        processes = profiler.processes

        def keep(pid: int) -> bool:
            if pid in index.by_pid:
                return True
            if not index.by_container or not pid:
                return False
            info = processes.get(pid)
            return info is not None and info.container_id in index.by_container
        return keep

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # the thread sends the last interval, then ends; symbolizing it can take a while
            self._thread.join(timeout=STOP_TIMEOUT_S)
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            self._close(profiler)
        verbose.forget(self)

    def _close(self, profiler) -> None:
        """Close a session: its counters kept by the metrics first (read no more after)."""
        self.metrics.retire(profiler)
        profiler.close()

    # -- attribution and encoding ---------------------------------------------------------------
    @staticmethod
    def split(profile: Profile, index: TargetIndex, args: dict):
        """Yield (series labels, Profile) per target and pid; samples keep only the trace/span labels."""
        targets: dict[tuple, ResolvedTarget] = {}

        def target_and_pid(s: Sample):
            if s.pid == 0:
                return None
            target = index.match(s.pid, s.label("container_id"))
            if target is None:
                if args["targets_only"]:
                    return None
                target = _DEFAULT
            targets[target.key] = target
            return (target.key, s.pid)

        if args["reporter_unsymbolized_stubs"]:
            profile = transforms.stub_unsymbolized(profile)
        if args["comm"] in ("stackframe", "both"):
            profile = transforms.comm_as_frame(profile)
        for (key, _pid), sub in transforms.split(profile, target_and_pid).items():
            labels = targets[key].labels
            if profile.name != labels.get("__name__"):
                labels = {**labels, "__name__": profile.name}
            yield labels, transforms.keep_labels(sub, ("trace_id", "span_id"))

    def _encode(self, labels: dict[str, str], sub: Profile, args: dict) -> tuple[dict[str, str], bytes, Profile]:
        from ...profile.pprof import encode_pprof
        raw = encode_pprof(sub, compress=True, comm_label=args["comm"] in ("label", "both"),
                           pid_label=args["pid_label"])
        service = labels.get("service_name", "")
        self.metrics.pprofs.labels(self.id, "/", service).inc()
        self.metrics.pprof_bytes.labels(self.id, "/", service).inc(len(raw))
        self.metrics.pprof_samples.labels(self.id, "/", service).inc(len(sub.samples))
        return labels, raw, sub

    def _send(self, items: list[tuple[dict[str, str], bytes, Profile]], args: dict) -> None:
        """One interval's profiles to every receiver at once (pyroscope.write sends them in as few
        requests as their sizes allow)."""
        started = time.monotonic()
        taken = [True] * len(items)
        for receiver in args["forward_to"]:
            oks = receiver.append_many([(dict(labels), raw, sub) for labels, raw, sub in items])
            for i, ok in enumerate(oks):
                if not ok:
                    taken[i] = False
                    self.metrics.pprofs_dropped.labels(self.id, "/").inc()
        self.log.debug("%s: forwarded %d profiles (%d bytes) to %d receivers, %d not taken", self.id, len(items),
                       sum(len(raw) for _labels, raw, _sub in items), len(args["forward_to"]), taken.count(False))
        per_item = (time.monotonic() - started) / len(items)
        for ok in taken:
            self.metrics.fanout_latency.labels(self.id, "/").observe(per_item)
            if ok:   # as Alloy's fan-out: counted when every receiver took it
                self.metrics.forwarded.labels(self.id, "/").inc()
        self.pprofs_sent += len(items)

    # -- component page -------------------------------------------------------------------------
    def debug_info(self) -> dict:
        info: dict = {"targets": [t.labels for t in list(self.index.by_pid.values())[:200]] +
                      [t.labels for t in list(self.index.by_container.values())[:200]],
                      "active_targets": len(self.index), "pprofs_sent": self.pprofs_sent,
                      "session": "running" if self.profiler is not None else "stopped"}
        if self.last_error:
            info["last_error"] = self.last_error
        profiler = self.profiler
        if profiler is not None:
            sym = profiler.symbolizer.debug_info()   # elf_cache per build id, pid_cache per process
            sym["elf_cache"]["files"] = sym["elf_cache"]["files"][:500]
            sym["pid_cache"]["processes"] = sym["pid_cache"]["processes"][:500]
            info.update(sym)
            info["runtimes"] = {s.name: s.stats() for s in built_sources(profiler)}
        return info

