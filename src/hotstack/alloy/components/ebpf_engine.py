"""The engine behind one pyroscope.ebpf: the CPU sampler, plus the off-CPU and probe samplers
when their arguments ask for them, sharing one process table and one symbolizer."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

from ...errors import HotstackError
from ...profile.model import Profile
from ...sampling.profiler import CpuProfiler


class _TargetPython:
    """The Python unwinder as the profiler sees it, listing only the processes targets want."""

    def __init__(self, unwinder, profiler: "TargetCpuProfiler") -> None:
        self.unwinder = unwinder
        self._profiler = profiler

    def observe(self, pid: int):
        keep = self._profiler.keep_pid
        if keep is not None and not keep(pid):
            self._profiler._declined.add(pid)
            return None
        return self.unwinder.observe(pid)

    def __getattr__(self, name: str):
        return getattr(self.unwinder, name)


class TargetCpuProfiler(CpuProfiler):
    """The CPU profiler, told which pids a target will use (`keep_pid`). The others are not
    worked on: no stack snapshots to unwind, no Python frames to read, nothing to symbolize.
    On a busy host that is most of the agent's CPU (bench/agent.py). A pid declined at first
    sight is reconsidered when the targets change (`set_keep`)."""

    keep_pid: Callable[[int], bool] | None = None

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._declined: set[int] = set()
        self.python = _TargetPython(self.python, self)

    def set_keep(self, keep: Callable[[int], bool] | None) -> None:
        self.keep_pid = keep
        for pid in list(self._declined):
            if keep is None or keep(pid):
                self._declined.discard(pid)
                if super()._wants_snapshots(pid):
                    self.session.mark_snapshot_pid(pid)
                    self._snapshot_pids.add(pid)
                self.python.unwinder.observe(pid)

    def start(self) -> None:
        keep = self.keep_pid
        unwinder = self.python.unwinder
        running = getattr(unwinder, "_running", None)
        if keep is not None and running:
            # Python processes found at start are listed only if a target wants them.
            unwinder._running = [p for p in running if keep(p.pid)]
            self._declined.update(p.pid for p in running if not keep(p.pid))
        super().start()

    def _wants_snapshots(self, pid: int) -> bool:
        keep = self.keep_pid
        if keep is not None and not keep(pid):
            self._declined.add(pid)
            return False
        return super()._wants_snapshots(pid)

    def to_profile(self, batch):
        keep = self.keep_pid
        if keep is not None:
            batch = dataclasses.replace(batch, samples=[s for s in batch.samples if keep(s.pid)],
                                        snapshots=[s for s in batch.snapshots if keep(s.pid)])
        return super().to_profile(batch)

    def _forget_dead(self) -> None:
        super()._forget_dead()
        self._declined = {pid for pid in self._declined if os.path.exists(f"/proc/{pid}")}


class Engine:
    def __init__(self, args: dict) -> None:
        from ...procs import ProcessTable
        from ...sampling.session import SamplerConfig
        from ...symbols.symbolizer import Symbolizer
        from . import ebpf_args

        self.processes = ProcessTable()
        # Alloy's default is demangle = "none"; the symbolizer's own default differs, so always pass it.
        self.symbolizer = Symbolizer(self.processes, demangle=args["demangle"])
        obi = None
        if ebpf_args.OBI_AVAILABLE():
            from ...sampling.obi import ObiConfig
            obi = ObiConfig(enabled=args["obi_process_context_enabled"], bpf_fs_root=args["bpf_fs_root"])
        fields = {"frequency": args["sample_rate"], "kernel_stacks": args["kernel_frames"]}
        if ebpf_args._sampler_field("obi"):
            fields["obi"] = obi   # trace_id/span_id sample labels from OBI's pinned map, when there is one
        if ebpf_args._sampler_field("python_enabled"):
            fields["python_enabled"] = args["python_enabled"]
        self.cpu = TargetCpuProfiler(SamplerConfig(**fields), symbolizer=self.symbolizer, processes=self.processes)
        self.profilers: list = [self.cpu]
        if args["off_cpu_threshold"] > 0:
            from ...sampling.offcpu import OffCpuConfig, OffCpuProfiler
            config = OffCpuConfig(threshold=args["off_cpu_threshold"], obi=obi)
            config.validate()
            self.profilers.append(OffCpuProfiler(config, symbolizer=self.symbolizer, processes=self.processes))
        if args["probe_links"] or args["u_probe_links"]:
            from ...sampling.probes import ProbeConfig, ProbeProfiler
            config = ProbeConfig.from_strings(args["probe_links"], args["u_probe_links"], obi=obi)
            self.profilers.append(ProbeProfiler(config, symbolizer=self.symbolizer, processes=self.processes))

    def set_keep(self, keep) -> None:
        self.cpu.set_keep(keep)

    def start(self) -> None:
        """Start every sampler; a failure closes what started and becomes one HotstackError line."""
        from ...sampling.diagnose import check_preconditions, explain
        started = []
        try:
            check_preconditions()
            for p in self.profilers:
                p.start()
                started.append(p)
        except Exception as e:  # loader failures become one line
            for p in started:
                p.close()
            raise (e if isinstance(e, HotstackError) else explain(e)) from None

    def collect(self) -> list[Profile]:
        return [p.collect() for p in self.profilers]

    def close(self) -> None:
        for p in self.profilers:
            try:
                p.close()
            except Exception:   # closing must reach every sampler
                pass

    @property
    def session(self):
        return self.cpu.session
