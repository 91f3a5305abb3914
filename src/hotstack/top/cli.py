"""`hotstack top` flags, and the wiring from them to the live view."""

from __future__ import annotations

import argparse

from .view import SORTS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                   help="profile only this process (repeatable); default: the whole host")
    p.add_argument("--comm", action="append", default=[], metavar="NAME",
                   help="profile only processes with this command name (repeatable)")
    p.add_argument("--rate", type=int, default=99, metavar="HZ", help="samples per second per CPU (default 99)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes (default 1)")
    p.add_argument("--window", type=float, default=10.0, metavar="S",
                   help="seconds of samples the shares are over (default 10; 0: since start)")
    p.add_argument("--timeout", type=float, default=0.0, metavar="S", help="stop after S seconds (default: until q)")
    p.add_argument("--sort", choices=SORTS, default="self", help="initial sort (keys s, t, n change it)")
    p.add_argument("--filter", default="", metavar="TEXT", help="initial filter on function or module names (key /)")
    p.add_argument("--show-hotstack", action="store_true",
                   help="show hotstack's own functions (by default its samples are counted without its user "
                        "stacks, one row in whole-host views)")


def run(args: argparse.Namespace) -> int:
    from .app import TopOptions, run_top

    return run_top(TopOptions(pids=tuple(args.pid), comms=tuple(args.comm), frequency=args.rate,
                              interval=args.interval, window=args.window, timeout=args.timeout,
                              show_hotstack=args.show_hotstack, sort=args.sort, filter=args.filter))
