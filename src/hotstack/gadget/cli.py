"""Flags of `hotstack run GADGET` (Inspektor Gadget's names) and their wiring.

Gadgets are looked up in a registry (registry.GADGETS): a new gadget registers a function that
takes the parsed flags and returns the exit code.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys

from ..errors import ConfigError
from ..units import parse_duration
from ..runtimes.versions import RUNTIME_VERSIONS
from .. import procs
from .registry import GADGETS, register

# The kernel's limits: pids go up to PID_MAX_LIMIT (4M on 64-bit), and a task's comm holds 15
# characters (TASK_COMM_LEN 16 with the NUL), so a longer --comm could never match as typed.
PID_MAX_LIMIT = 1 << 22
COMM_MAX = 15
MAX_SECONDS = 366 * 86400      # a longer --timeout is a typo (0 runs until Ctrl-C)


# `ig run` flags hotstack run does not have, and why: each is one error naming it (exit 2), where
# argparse would print its usage. (--collect-ustack is accepted: hotstack always collects user stacks.)
IG_FLAGS_NOT_HERE = {
    "--tid": "threads are not filtered; --pid filters processes",
    "--k8s-selector": "Kubernetes label selectors; --k8s-namespace, --k8s-podname, --k8s-containername select",
    "--containerimage-digest": "selection by image", "--containerimage-id": "selection by image",
    "--containerd-namespace": "containerd namespaces", "--runtime-protocol": "a runtime protocol choice",
    "--docker-socketpath": "socket paths; hotstack reads $DOCKER_HOST",
    "--containerd-socketpath": "socket paths; hotstack reads $CONTAINER_RUNTIME_ENDPOINT",
    "--crio-socketpath": "socket paths; hotstack reads $CONTAINER_RUNTIME_ENDPOINT",
    "--podman-socketpath": "socket paths",
    "--collect-kstack": "kernel stacks are always collected; --user-stacks-only leaves them out",
    "--collect-build-id": "build ids per frame; frames are named on this host",
    "--collect-otel-stack": "the OpenTelemetry unwinder; hotstack unwinds runtimes itself",
    "--symbolizers": "a symbolizer choice; hotstack reads .symtab, .dynsym, debug files and runtimes",
    "--debuginfod-cache-path": "a debuginfod cache",
    "--otel-logs-exporter": "OpenTelemetry logs", "--otel-metrics-exporter": "OpenTelemetry metrics",
    "--otel-metrics-listen": "OpenTelemetry metrics",
    "--verify-image": "gadget images (gadgets are built in)", "--public-keys": "gadget images (gadgets are built in)",
    "--pull": "gadget images (gadgets are built in)", "--validate-metadata": "gadget images (gadgets are built in)",
    "--gpu-idle-only": "GPU sampling", "--gpu-util-max-pct": "GPU sampling", "--min-gpu-mem-bytes": "GPU sampling",
    "--stale-threshold-ms": "GPU sampling",
}


class _IgFlag(argparse.Action):
    """An `ig run` flag: remembered as given, judged by check_flags (never parsed into a setting)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.ig_flags = [*getattr(namespace, "ig_flags", []), (option_string, values)]


def _versions(runtime: str) -> str:
    return RUNTIME_VERSIONS[runtime].summary()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("gadget", help="the gadget to run: " + ", ".join(GADGETS))
    p.add_argument("-t", "--timeout", type=float, default=0, metavar="SECONDS",
                   help="stop after SECONDS and print the result (0 = until Ctrl-C)")
    p.add_argument("--sample-rate", type=int, default=49, metavar="HZ", help="samples per second per CPU (1..1000)")
    # ig's default (pkg/operators/ebpf: 1000ms): a table, a JSON array or an export every second.
    p.add_argument("--map-fetch-interval", default="1000ms", metavar="DURATION",
                   help="print what was collected every DURATION (e.g. 5s, 500ms; default 1000ms, as ig); "
                        "0 = once at the end")
    p.add_argument("--map-fetch-count", type=int, default=0, metavar="N",
                   help="stop after N fetches of --map-fetch-interval (0 = no limit)")
    p.add_argument("--pid", type=int, action="append", default=[], help="only this process (repeatable)")
    p.add_argument("--comm", action="append", default=[], help="only processes with this command name (repeatable)")
    p.add_argument("--uid", type=int, default=None, metavar="UID",
                   help="only processes of this real user id (as ig; read from /proc when the row is made)")
    p.add_argument("--gid", type=int, default=None, metavar="GID",
                   help="only processes of this real group id (as ig; read from /proc when the row is made)")
    p.add_argument("--include-idle", action="store_true", help="also count samples of idle CPUs")
    p.add_argument("--unwind", choices=("kernel", "fp"), default="kernel",
                   help="user stacks: kernel = every stack unwound in the kernel with .eh_frame tables in BPF "
                        "maps (default); fp = frame pointers only (cheaper; loses callers where code has none)")
    p.add_argument("--python", action=argparse.BooleanOptionalAction, default=True,
                   help="show the Python functions (file, line) that CPython processes run, in place of the "
                        f"interpreter's frames: {_versions('python')} (default: on)")
    p.add_argument("--node", action=argparse.BooleanOptionalAction, default=True,
                   help="show the JavaScript functions (name, script, line) that Node.js processes run, in "
                        f"place of V8's JIT and builtin frames: {_versions('node')}; needs --unwind kernel "
                        "(default: on)")
    p.add_argument("--ruby", action=argparse.BooleanOptionalAction, default=True,
                   help="show the Ruby methods, blocks (file, line) and C functions that Ruby processes run, in "
                        f"place of the VM's frames: {_versions('ruby')} (default: on)")
    p.add_argument("--php", action=argparse.BooleanOptionalAction, default=True,
                   help="show the PHP functions (Class::method, file, line) that PHP processes run, in place of "
                        f"the Zend VM's frames: {_versions('php')} (default: on)")
    p.add_argument("--java", action=argparse.BooleanOptionalAction, default=True,
                   help="show the Java methods (package.Class.method, inlined ones too) that HotSpot JVMs run, in "
                        f"place of the code cache's frames: {_versions('java')}; needs --unwind kernel (default: on)")
    p.add_argument("--perl", action=argparse.BooleanOptionalAction, default=True,
                   help="show the Perl subs (Package::sub, file, line) that Perl processes run, in place of "
                        f"the runloop's frames: {_versions('perl')} (default: on)")
    p.add_argument("--kernel-stacks-only", action="store_true", help="collect only kernel stacks")
    p.add_argument("--user-stacks-only", action="store_true", help="collect only user stacks")
    p.add_argument("-o", "--output", default="columns",
                   help="columns | json | jsonpretty | yaml | folded | pprof | flamegraph | none (pprof and "
                        "flamegraph need --file)")
    c = p.add_argument_group("containers and rows (as ig run)")
    c.add_argument("-c", "--containername", "--runtime-containername", dest="containername", default="",
                   metavar="NAMES", help="only these containers (comma list; '!name' to leave them out)")
    c.add_argument("-n", "--k8s-namespace", default="", metavar="NAMES", help="only these Kubernetes namespaces")
    c.add_argument("--k8s-podname", default="", metavar="NAMES", help="only these pods")
    c.add_argument("--k8s-containername", default="", metavar="NAMES", help="only these Kubernetes containers")
    c.add_argument("--host", action="store_true",
                   help="host processes too (default, as ig: only processes in containers known to the host's "
                        "runtimes; --pid PID is always profiled)")
    c.add_argument("--fields", default="", metavar="F1,F2|+F|-F",
                   help="-o json/jsonpretty/yaml: only these fields, or +field/-field from the default ones")
    c.add_argument("--filter", default="", metavar="EXPR",
                   help="only rows where every FIELD OP VALUE holds (OP: == != >= > <= < ~regex), e.g. proc.comm==nginx")
    c.add_argument("--filter-expr", default="", metavar="EXPR",
                   help="only rows where the expr-lang expression holds, e.g. 'proc.comm == \"nginx\" && proc.pid > 1' "
                        "(== != < <= > >= matches contains startsWith endsWith in, && || !, parentheses)")
    c.add_argument("--sort", default="", metavar="F1,-F2", help="-o json/jsonpretty/yaml: order rows by these fields")
    p.add_argument("--file", default="", metavar="PATH",
                   help="write -o pprof (gzipped profile.proto), flamegraph (HTML) or folded to PATH")
    p.add_argument("--max-entries", type=int, default=20, metavar="N", help="rows shown by -o columns")
    p.add_argument("--show-hotstack", action="store_true",
                   help="show hotstack's own stacks (by default its samples are counted without its user stacks, "
                        "and -o columns shows them as one row)")
    p.add_argument("--annotate", action="append", default=[], metavar="ANNOTATION",
                   help="datasource annotations: samples:KEY=VALUE or samples.FIELD:KEY=VALUE (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print debug information to stderr (as ig's -v): each unwind table built, exec detection, "
                        "trace correlation")
    p.add_argument("--demangle", default="full", metavar="MODE",
                   help="C++/Rust names: none | simplified | templates | full (default full)")
    e = p.add_argument_group("profile_probe and profile_offcpu")
    e.add_argument("--probe", action="append", default=[], metavar="LINK",
                   help="profile_probe: kprobe:SYM, kretprobe:SYM, uprobe:/path:SYM or uretprobe:/path:SYM (repeatable)")
    e.add_argument("--off-cpu-threshold", type=float, default=1.0, metavar="P",
                   help="profile_offcpu: chance (0..1] that a switch off the CPU is recorded (default 1: all)")
    c.add_argument("-r", "--runtimes", default="", metavar="NAMES",
                   help="container runtimes to ask (as ig): docker, containerd, cri-o, podman "
                        "(comma list; default docker, containerd, cri-o)")
    ig = p.add_argument_group("ig flags accepted for scripts' sake")
    ig.add_argument("--collect-ustack", action=_IgFlag, nargs="?", default=None, metavar="BOOL",
                    help="ig's switch for user stacks: hotstack always collects them (=false is refused: "
                         "--kernel-stacks-only leaves them out)")
    for flag in IG_FLAGS_NOT_HERE:
        ig.add_argument(flag, action=_IgFlag, nargs="?", help=argparse.SUPPRESS)
    p.set_defaults(ig_flags=[])
    g = p.add_argument_group("OpenTelemetry profiles")
    g.add_argument("--config", default=None, metavar="FILE",
                   help="Inspektor Gadget config file (ig-config.yaml) with operator.otel-profiles.exporters")
    g.add_argument("--otel-profiles-exporter", default="", metavar="NAME[,NAME]",
                   help="export profiles with these exporters of --config (or DATASOURCE:NAME,...)")
    g.add_argument("--otel-profiles-sanitize-labels", action="store_true",
                   help="export sample attribute names with '_' instead of '.' (k8s.namespace -> k8s_namespace)")


def run(args: argparse.Namespace) -> int:
    runner = GADGETS.get(args.gadget)
    if runner is None:
        raise ConfigError(f"unknown gadget {args.gadget!r}: this build has {', '.join(GADGETS)}")
    check_flags(args)
    use_runtimes(args.runtimes)
    if args.verbose:
        _log_debug()
    signal.signal(signal.SIGHUP, _hang_up)
    return runner(args)


def _hang_up(signum, frame) -> None:
    """A hang-up (the terminal closed, or `kill -HUP`) ends a run as SIGTERM does: the run stops,
    flushes its exporters and writes its file. Forwarding it keeps one stop path, the one of
    SIGTERM, which the run installs once sampling begins; before that, it ends the start-up
    quietly, as Ctrl-C does."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGTERM)


def _log_debug() -> None:
    """hotstack's own loggers at DEBUG on stderr (not the libraries' below it)."""
    import logging

    from ..text import EscapingFormatter
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter("hotstack: %(levelname)s: %(name)s: %(message)s"))
    root = logging.getLogger("hotstack")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)


def _check_ig_flags(given: list[tuple[str, str | None]]) -> None:
    for flag, value in given:
        if flag == "--collect-ustack":
            if (value or "true").lower() in ("true", "1"):
                continue
            raise ConfigError(f"--collect-ustack={value}: hotstack always collects user stacks; "
                              f"--kernel-stacks-only leaves them out")
        raise ConfigError(f"{flag}: an ig run flag that hotstack run does not have ({IG_FLAGS_NOT_HERE[flag]})")


def use_runtimes(spec: str) -> None:
    """-r/--runtimes: only these container runtimes name containers and make ig's scope."""
    if not spec:
        return
    names = [n.strip() for n in spec.split(",") if n.strip()]
    from ..containers import RUNTIME_NAMES, named_runtimes, use_runtimes as use
    unknown = [n for n in names if n not in RUNTIME_NAMES]
    if unknown or not names:
        raise ConfigError(f"--runtimes {spec!r}: unknown runtime {unknown[0] if unknown else ''!r} "
                          f"(expected a comma list of {', '.join(RUNTIME_NAMES)})")
    use(named_runtimes(names))


def _warn(message: str) -> None:
    print(f"hotstack: warning: {message}", file=sys.stderr)


def check_flags(args: argparse.Namespace) -> None:
    """What argparse's types cannot say: finite durations, pids the kernel could have, comm lengths.
    Errors are one line naming the flag (exit 2); what is only suspicious is a warning."""
    _check_ig_flags(args.ig_flags)
    interval = parse_duration(args.map_fetch_interval, "--map-fetch-interval")
    for flag, value in (("--timeout", args.timeout), ("--map-fetch-interval", interval)):
        if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
            raise ConfigError(f"{flag} {args.timeout if flag == '--timeout' else args.map_fetch_interval}: "
                              f"expected 0 or a number of seconds up to {MAX_SECONDS} (366 days)")
    if args.map_fetch_count < 0:
        raise ConfigError(f"--map-fetch-count {args.map_fetch_count}: expected 0 (no limit) or a number of fetches")
    if not math.isfinite(args.off_cpu_threshold):
        raise ConfigError(f"--off-cpu-threshold {args.off_cpu_threshold}: expected a number in (0, 1]")
    for flag, value in (("--uid", args.uid), ("--gid", args.gid)):
        if value is not None and not 0 <= value < 1 << 32:
            raise ConfigError(f"{flag} {value}: expected an id from 0 to {(1 << 32) - 1}")
    for pid in args.pid:
        if not 1 <= pid <= PID_MAX_LIMIT:
            raise ConfigError(f"--pid {pid}: not a process id (expected 1..{PID_MAX_LIMIT})")
    for pid in args.pid:
        if not procs.exists(pid):
            _warn(f"--pid {pid}: no such process (nothing will be sampled from it unless it appears)")
    comms = []
    for comm in args.comm:
        if not comm:
            raise ConfigError("--comm '': expected a command name")
        if len(comm.encode()) > COMM_MAX:
            short = comm.encode()[:COMM_MAX].decode("utf-8", "ignore")
            _warn(f"--comm {comm!r} is longer than the kernel's {COMM_MAX} characters of a command name; "
                  f"matching processes whose name is {short!r}")
            comm = short
        comms.append(comm)
    args.comm = comms


@register("profile_cpu")
def run_profile_cpu(args: argparse.Namespace) -> int:
    from .run import run_profile_cpu as run_gadget

    return run_gadget(profile_run_options(args))


def profile_run_options(args: argparse.Namespace):
    """RunOptions from the common flags (shared by the profiling gadgets)."""
    from .run import RunOptions

    return RunOptions.from_args(args)


# Gadgets beyond profile_cpu register themselves on import.
from . import profile_offcpu, profile_probe  # noqa: E402,F401
