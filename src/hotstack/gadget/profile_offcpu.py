"""The profile_offcpu gadget: where threads wait, weighted by the time they spend off the CPU.

`hotstack run profile_offcpu --timeout 5 [--off-cpu-threshold 0.1] [--pid N]`. The profile is
pyroscope.ebpf's `offcpu:offcpu:nanoseconds::`: values are nanoseconds, no period type.
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .profile_probe import event_datasource, reject_cpu_only_flags
from .registry import register


@register("profile_offcpu")
def run_profile_offcpu(args: argparse.Namespace) -> int:
    from .run import RunOptions, run_gadget

    reject_cpu_only_flags(args, "profile_offcpu")
    if args.probe:
        raise ConfigError("--probe goes with the profile_probe gadget")
    opts = RunOptions.from_args(args)
    config = opts.engine_config(cpu=False, off_cpu_threshold=args.off_cpu_threshold)
    return run_gadget(opts, config, event_datasource("offcpu", "offcpu", "nanoseconds"))
