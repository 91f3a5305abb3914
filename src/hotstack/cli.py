"""Command line: argument parsing and wiring only. The only place that prints errors."""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import HotstackError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hotstack", description="Continuous CPU profiler for Linux (eBPF).")
    parser.add_argument("--version", action="version", version=f"hotstack {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from .gadget import cli as gadget_cli
    run = sub.add_parser("run", help="run a gadget, e.g. `hotstack run profile_cpu` (Inspektor Gadget style)")
    gadget_cli.add_arguments(run)
    run.set_defaults(func=gadget_cli.run)

    doctor = sub.add_parser("doctor", help="check what this host offers for profiling")
    doctor.set_defaults(func=lambda args: __import__("hotstack.doctor", fromlist=["report"]).report(sys.stdout))

    try:
        from .alloy import cli as alloy_cli
    except ImportError:
        alloy_cli = None
    if alloy_cli is not None and hasattr(alloy_cli, "add_arguments"):
        agent = sub.add_parser("agent", help="run an Alloy pipeline: `hotstack agent CONFIG.alloy`")
        alloy_cli.add_arguments(agent)
        agent.set_defaults(func=alloy_cli.run)
    return parser




def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HotstackError as e:
        if args.debug:
            raise
        print(f"hotstack: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
