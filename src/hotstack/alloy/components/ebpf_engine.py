"""The engine behind one pyroscope.ebpf: the CPU sampler, plus the off-CPU and probe samplers
when their arguments ask for them, sharing one process table and one symbolizer."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ...errors import HotstackError
from ...profile.model import Profile
from ...sampling.profiler import CpuProfiler


class TargetCpuProfiler(CpuProfiler):
    """The CPU profiler, told which pids a target will use: the others are dropped before
    unwinding and symbolizing, which is most of the agent's CPU on a busy host."""

    keep_pid: Callable[[int], bool] | None = None

    def to_profile(self, batch):
        keep = self.keep_pid
        if keep is not None:
            batch = dataclasses.replace(batch, samples=[s for s in batch.samples if keep(s.pid)],
                                        snapshots=[s for s in batch.snapshots if keep(s.pid)])
        return super().to_profile(batch)


class Engine:
    def __init__(self, args: dict) -> None:
        from ...procs import ProcessTable
        from ...sampling.session import SamplerConfig
        from ...symbols.symbolizer import Symbolizer
        from . import ebpf_args

        self.processes = ProcessTable()
        # Alloy's default is demangle = "none"; the symbolizer's own default differs, so always pass it.
        self.symbolizer = Symbolizer(self.processes, demangle=args["demangle"])
        fields = {"frequency": args["sample_rate"], "kernel_stacks": args["kernel_frames"]}
        if ebpf_args._sampler_field("python_enabled"):
            fields["python_enabled"] = args["python_enabled"]
        self.cpu = TargetCpuProfiler(SamplerConfig(**fields), symbolizer=self.symbolizer, processes=self.processes)
        self.profilers: list = [self.cpu]
        obi = None
        if ebpf_args.OBI_AVAILABLE():
            from ...sampling.obi import ObiConfig
            obi = ObiConfig(enabled=args["obi_process_context_enabled"], bpf_fs_root=args["bpf_fs_root"])
        if args["off_cpu_threshold"] > 0:
            from ...sampling.offcpu import OffCpuConfig, OffCpuProfiler
            config = OffCpuConfig(threshold=args["off_cpu_threshold"], obi=obi)
            config.validate()
            self.profilers.append(OffCpuProfiler(config, symbolizer=self.symbolizer, processes=self.processes))
        if args["probe_links"] or args["u_probe_links"]:
            from ...sampling.probes import ProbeConfig, ProbeProfiler
            config = ProbeConfig.from_strings(args["probe_links"], args["u_probe_links"], obi=obi)
            self.profilers.append(ProbeProfiler(config, symbolizer=self.symbolizer, processes=self.processes))

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
