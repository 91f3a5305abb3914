"""The profile_offcpu gadget: where threads wait, weighted by the time they spend off the CPU.

`hotstack run profile_offcpu --timeout 5 [--off-cpu-threshold 0.1] [--pid N]`. The profile is
pyroscope.ebpf's `offcpu:offcpu:nanoseconds::`: values are nanoseconds, no period type.
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..sampling.offcpu import OffCpuConfig, OffCpuProfiler
from .cli import profile_run_options, register
from .profile_probe import event_datasource, reject_cpu_only_flags


@register("profile_offcpu")
def run_profile_offcpu(args: argparse.Namespace) -> int:
    from .run import run_profile_cpu

    reject_cpu_only_flags(args, "profile_offcpu")
    if args.probe:
        raise ConfigError("--probe goes with the profile_probe gadget")
    opts = profile_run_options(args)
    config = OffCpuConfig(threshold=args.off_cpu_threshold, pids=opts.pids)
    config.validate()
    ds = event_datasource("offcpu", "offcpu", "nanoseconds")
    ds.annotate(opts.annotations)
    return run_profile_cpu(opts, datasource=ds,
                           make_profiler=lambda procs, sym: OffCpuProfiler(config, processes=procs, symbolizer=sym))
