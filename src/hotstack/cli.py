"""Command line: argument parsing and wiring only. The only place that prints errors."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from . import __version__, gc_policy, interrupted_while_starting, malloc, stop_while_starting
from .errors import HotstackError, OutputError
from .text import EscapingFormatter, escape_lines


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser. Each front door's flags are imported only when its command runs (or for
    help), so that `hotstack run` does not pay for importing the Alloy pipeline and back."""
    parser = argparse.ArgumentParser(prog="hotstack", description="Continuous CPU profiler for Linux (eBPF).")
    parser.add_argument("--version", action="version", version=f"hotstack {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a gadget, e.g. `hotstack run profile_cpu` (Inspektor Gadget style)")
    if command in (None, "run"):
        from .gadget import cli as gadget_cli
        gadget_cli.add_arguments(run)
        run.set_defaults(func=gadget_cli.run)

    top = sub.add_parser("top", help="a live view of the hottest functions (like py-spy top, perf top)")
    if command in (None, "top"):
        from .top import cli as top_cli
        top_cli.add_arguments(top)
        top.set_defaults(func=top_cli.run)

    doctor = sub.add_parser("doctor", help="check what this host offers for profiling")
    doctor.add_argument("--pid", type=int, metavar="PID",
                        help="explain what hotstack reads of this process: its runtime, version, and why not")
    # a debugging aid: the process of --pid recorded into a directory (procs.record), read back by tests
    doctor.add_argument("--record", metavar="DIR", help=argparse.SUPPRESS)
    doctor.set_defaults(func=lambda args: __import__("hotstack.doctor", fromlist=["main"]).main(args, sys.stdout))

    agent = sub.add_parser("agent", help="run an Alloy pipeline: `hotstack agent CONFIG.alloy`")
    if command in (None, "agent"):
        from .alloy import cli as alloy_cli
        alloy_cli.add_arguments(agent)
        agent.set_defaults(func=alloy_cli.run)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if any (None: build every front door)."""
    for word in argv:
        if word in ("run", "top", "doctor", "agent"):
            return word
        if not word.startswith("-"):
            return None
    return None


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C can come at any instant, also while the front door's modules are still being
    # imported: everything, parsing included, is inside the handler. A hang-up before a front
    # door has its own handler (the agent reloads, a run stops and flushes) ends as Ctrl-C does,
    # instead of killing the process with no word.
    previous = signal.signal(signal.SIGHUP, stop_while_starting)
    # Warnings logged before (or without) a front door's own handler: escaped as every log line.
    logging.lastResort.setFormatter(EscapingFormatter())
    malloc.tune()       # before any thread starts: each would get an arena of its own (malloc.py)
    gc_policy.tune()    # fewer collections of a heap that makes little cyclic garbage (gc_policy.py)
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        return 130
    except Exception:
        if interrupted_while_starting():     # an import cut by Ctrl-C that surfaced as another error
            return 130
        raise
    finally:
        signal.signal(signal.SIGHUP, previous)


def _main(argv: list[str]) -> int:
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HotstackError as e:
        if args.debug:
            raise
        if isinstance(e, OutputError):
            _drop_stdout()
        print(f"hotstack: error: {escape_lines(e)}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:     # the reader went away (`| head`): not an error
        _drop_stdout()
        return 0


def _drop_stdout() -> None:
    """stdout on /dev/null once it failed: what is still buffered goes there at exit, instead of
    failing again in the interpreter's own flush (a second, raw message)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
