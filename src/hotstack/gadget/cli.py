"""Flags of `hotstack run GADGET` (Inspektor Gadget's names) and their wiring."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..units import parse_duration

GADGETS = ("profile_cpu",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("gadget", help="the gadget to run: " + ", ".join(GADGETS))
    p.add_argument("-t", "--timeout", type=float, default=0, metavar="SECONDS",
                   help="stop after SECONDS and print the result (0 = until Ctrl-C)")
    p.add_argument("--sample-rate", type=int, default=49, metavar="HZ", help="samples per second per CPU (1..1000)")
    p.add_argument("--map-fetch-interval", default="0", metavar="DURATION",
                   help="print what was collected every DURATION (e.g. 5s, 500ms); 0 = once at the end")
    p.add_argument("--pid", type=int, action="append", default=[], help="only this process (repeatable)")
    p.add_argument("--comm", action="append", default=[], help="only processes with this command name (repeatable)")
    p.add_argument("--include-idle", action="store_true", help="also count samples of idle CPUs")
    p.add_argument("--kernel-stacks-only", action="store_true", help="collect only kernel stacks")
    p.add_argument("--user-stacks-only", action="store_true", help="collect only user stacks")
    p.add_argument("-o", "--output", default="columns", help="columns | json | folded")
    p.add_argument("--max-entries", type=int, default=20, metavar="N", help="rows shown by -o columns")
    p.add_argument("--annotate", action="append", default=[], metavar="ANNOTATION",
                   help="datasource annotations: samples:KEY=VALUE or samples.FIELD:KEY=VALUE (repeatable)")
    p.add_argument("--demangle", default="full", metavar="MODE",
                   help="C++/Rust names: none | simplified | templates | full (default full)")


def run(args: argparse.Namespace) -> int:
    from .run import RunOptions, run_profile_cpu

    if args.gadget not in GADGETS:
        raise ConfigError(f"unknown gadget {args.gadget!r}: this build has {', '.join(GADGETS)}")
    opts = RunOptions(
        timeout=args.timeout, sample_rate=args.sample_rate,
        map_fetch_interval=parse_duration(args.map_fetch_interval, "--map-fetch-interval"),
        pids=tuple(args.pid), comms=tuple(args.comm), include_idle=args.include_idle,
        kernel_stacks_only=args.kernel_stacks_only, user_stacks_only=args.user_stacks_only,
        output=args.output, max_rows=args.max_entries, annotations=args.annotate, demangle=args.demangle)
    return run_profile_cpu(opts)
