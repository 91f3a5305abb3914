"""The profile_probe gadget: stacks of every hit of `--probe` links, counted.

`hotstack run profile_probe --probe uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc --timeout 5`
Links are pyroscope.ebpf's (`kprobe:SYM`, `kretprobe:SYM`, `uprobe:/path:SYM`, `uretprobe:/path:SYM`);
the profile is `process_cpu` with sample type uprobe/count, as pyroscope.ebpf sends it.
"""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..sampling.probe_links import parse_probe_links
from .profile_cpu import samples_datasource
from .registry import register


def event_datasource(name: str, sample_type: str, unit: str, period_type: str = "", period_unit: str = ""):
    """profile_cpu's `samples` datasource, re-annotated for an event-driven profile."""
    ds = samples_datasource()
    ds.annotations.update({"profiles.name": name, "profiles.type": sample_type, "profiles.unit": unit})
    for key in ("profiles.period-type", "profiles.period-unit", "profiles.period"):
        ds.annotations.pop(key, None)
    if period_type:
        ds.annotations.update({"profiles.period-type": period_type, "profiles.period-unit": period_unit,
                               "profiles.period": "1"})
    return ds


def reject_cpu_only_flags(args: argparse.Namespace, gadget: str) -> None:
    for flag, value in (("--comm", args.comm), ("--include-idle", args.include_idle),
                        ("--kernel-stacks-only", args.kernel_stacks_only),
                        ("--user-stacks-only", args.user_stacks_only)):
        if value:
            raise ConfigError(f"{flag} is a profile_cpu flag: {gadget} takes --pid to narrow what it records")


@register("profile_probe")
def run_profile_probe(args: argparse.Namespace) -> int:
    from .run import RunOptions, run_gadget

    reject_cpu_only_flags(args, "profile_probe")
    if not args.probe:
        raise ConfigError("profile_probe needs at least one --probe LINK, "
                          "e.g. --probe uprobe:/path/to/libc.so.6:malloc")
    opts = RunOptions.from_args(args)
    config = opts.engine_config(cpu=False, probe_links=tuple(parse_probe_links(args.probe)))
    return run_gadget(opts, config, event_datasource("process_cpu", "uprobe", "count", "uprobe", "count"))
