"""`hotstack run GADGET`: translate flags into the engine's config, run it, render and export.

Every gadget runs the same Engine (sampling/); a gadget only chooses its samplers (EngineConfig)
and its datasource (the annotations its exports read).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, TextIO

from .. import interrupted_while_starting
from ..errors import ConfigError, writing_stdout
from ..profile.model import Profile
from ..sampling.config import EngineConfig
from ..units import parse_duration
from . import filters, output
from .exports import RunExports
from .profile_cpu import samples_datasource
from .scope import ContainerScope
from .scope import hint as scope_hint

OUTPUT_MODES = ("columns", "json", "jsonpretty", "yaml", "folded", "pprof", "flamegraph", "none")
ROW_MODES = ("json", "jsonpretty", "yaml")         # outputs of datasource rows: --fields and --sort shape them
FILE_MODES = ("pprof", "flamegraph", "folded")   # -o MODE --file PATH


@dataclass
class RunOptions:
    timeout: float = 0
    sample_rate: int = 49
    map_fetch_interval: float = 1.0   # ig's default, 1000ms
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    include_idle: bool = False
    kernel_stacks_only: bool = False
    user_stacks_only: bool = False
    output: str = "columns"
    max_rows: int = 20
    annotations: list[str] = field(default_factory=list)
    demangle: str = "full"   # none | simplified | templates | full (Alloy's names)
    file: str = ""
    config: str | None = None
    otel_profiles_exporter: str = ""
    sanitize_labels: bool = False
    unwind: str = "kernel"   # kernel | fp (sampling/config.py)
    python_enabled: bool = True   # Python frames in place of the interpreter's (runtimes/python)
    node_enabled: bool = True     # JavaScript frames in place of V8's (runtimes/v8)
    ruby_enabled: bool = True     # Ruby frames in place of the VM's (runtimes/ruby)
    php_enabled: bool = True      # PHP frames in place of the Zend VM's (runtimes/php)
    java_enabled: bool = True     # Java frames in place of the JVM's code cache (runtimes/hotspot)
    perl_enabled: bool = True     # Perl frames in place of the runloop's (runtimes/perl)
    show_hotstack: bool = False   # hotstack's own stacks in whole-host tables (else one row)
    map_fetch_count: int = 0      # stop after this many fetches (0: no limit)
    containers: dict[str, str] = field(default_factory=dict)   # field -> ig's NAMES (-c, --k8s-*)
    filter: str = ""              # --filter
    filter_expr: str = ""         # --filter-expr (expr-lang)
    uid: int | None = None        # --uid: only processes of this real user id
    gid: int | None = None        # --gid: only processes of this real group id
    fields: str = ""              # --fields
    sort: str = ""                # --sort
    host: bool = False            # --host: every process; otherwise, as ig, processes in containers (scope.py)

    @classmethod
    def from_args(cls, args) -> "RunOptions":
        """RunOptions from `hotstack run`'s common flags (shared by the profiling gadgets)."""
        return cls(
            timeout=args.timeout, sample_rate=args.sample_rate,
            map_fetch_interval=parse_duration(args.map_fetch_interval, "--map-fetch-interval"),
            pids=tuple(args.pid), comms=tuple(args.comm), include_idle=args.include_idle,
            kernel_stacks_only=args.kernel_stacks_only, user_stacks_only=args.user_stacks_only,
            output=args.output, max_rows=args.max_entries, annotations=args.annotate, demangle=args.demangle,
            file=args.file, config=args.config, otel_profiles_exporter=args.otel_profiles_exporter,
            sanitize_labels=args.otel_profiles_sanitize_labels, unwind=getattr(args, "unwind", "kernel"),
            python_enabled=getattr(args, "python", True), node_enabled=getattr(args, "node", True),
            ruby_enabled=getattr(args, "ruby", True), php_enabled=getattr(args, "php", True),
            java_enabled=getattr(args, "java", True),
            perl_enabled=getattr(args, "perl", True),
            show_hotstack=getattr(args, "show_hotstack", False),
            map_fetch_count=getattr(args, "map_fetch_count", 0),
            containers={"runtime.containerName": getattr(args, "containername", ""),
                        "k8s.namespace": getattr(args, "k8s_namespace", ""),
                        "k8s.podName": getattr(args, "k8s_podname", ""),
                        "k8s.containerName": getattr(args, "k8s_containername", "")},
            filter=getattr(args, "filter", ""), filter_expr=getattr(args, "filter_expr", ""),
            uid=getattr(args, "uid", None), gid=getattr(args, "gid", None), fields=getattr(args, "fields", ""), sort=getattr(args, "sort", ""),
            host=getattr(args, "host", False))

    def validate(self) -> None:
        self.engine_config().validate(FLAG_NAMES)
        if self.timeout < 0:
            raise ConfigError("--timeout must be 0 (until Ctrl-C) or a positive number of seconds")
        if self.map_fetch_interval < 0:
            raise ConfigError("--map-fetch-interval must be 0 or a positive duration")
        if self.output not in OUTPUT_MODES:
            raise ConfigError(f"-o {self.output}: expected one of {', '.join(OUTPUT_MODES)}")
        if self.output in ("pprof", "flamegraph") and not self.file:
            raise ConfigError(f"-o {self.output} writes a file: add --file PATH")
        for flag, value in (("--fields", self.fields), ("--sort", self.sort)):
            if value and self.output not in ROW_MODES:
                raise ConfigError(f"{flag} shapes the rows of -o {', '.join(ROW_MODES)} (not -o {self.output}, "
                                  f"whose rows are stacks)")
        if self.file and self.output not in FILE_MODES:
            raise ConfigError(f"--file goes with -o {', '.join(FILE_MODES)} (not -o {self.output})")

    def engine_config(self, **samplers) -> EngineConfig:
        """profile_cpu's engine config; other gadgets pass their samplers (cpu=False, ...)."""
        return EngineConfig(frequency=self.sample_rate, pids=self.pids, comms=self.comms,
                            include_idle=self.include_idle, own_stacks=self.show_hotstack or bool(self.comms),
                            user_stacks=not self.kernel_stacks_only,
                            kernel_stacks=not self.user_stacks_only, unwind=self.unwind,
                            runtime_frames=(self.python_enabled or self.node_enabled or self.ruby_enabled
                                            or self.php_enabled or self.java_enabled or self.perl_enabled),
                            runtimes_off=runtimes_off(python=self.python_enabled, v8=self.node_enabled,
                                                      ruby=self.ruby_enabled, php=self.php_enabled,
                                                      hotspot=self.java_enabled, perl=self.perl_enabled),
                            demangle=self.demangle, **samplers)


def runtimes_off(**enabled: bool) -> tuple[str, ...]:
    """Frame sources (by their runtimes/registry.FRAME_SOURCES name) that a front door turned off."""
    return tuple(name for name, on in enabled.items() if not on)


# EngineConfig fields as `hotstack run` spells them, for its error messages.
FLAG_NAMES = {"frequency": "--sample-rate", "off_cpu_threshold": "--off-cpu-threshold", "unwind": "--unwind",
              "demangle": "--demangle", "kernel_stacks": "--kernel-stacks-only",
              "user_stacks": "--user-stacks-only", "pids": "--pid"}


ProfileSink = Callable[[Profile], None]


def run_profile_cpu(opts: RunOptions, out: TextIO | None = None, sinks: list[ProfileSink] | None = None) -> int:
    return run_gadget(opts, opts.engine_config(), samples_datasource(opts.sample_rate), out, sinks)


def run_gadget(opts: RunOptions, config: EngineConfig, ds, out: TextIO | None = None,
               sinks: list[ProfileSink] | None = None) -> int:
    """Run the engine with `config`, rendering and exporting what `ds` (the gadget's datasource) says.
    `out`: where the output is printed (default: stdout)."""
    opts = replace(opts, **{name: filters.for_datasource(getattr(opts, name), ds.name, flag) for name, flag in (
        ("output", "-o"), ("fields", "--fields"), ("sort", "--sort"))})
    opts.validate()
    config.validate(FLAG_NAMES)
    out = out if out is not None else output.stdout(opts.output, opts.file)
    ds.annotate(opts.annotations)
    rules = (filters.container_rules(opts.containers, ds) + filters.parse_filter(opts.filter, ds)
             + filters.expr_rules(opts.filter_expr, ds) + filters.credential_rules(opts.uid, opts.gid, ds))
    shape = output.RowShape(filters.select_fields(opts.fields, ds) if opts.fields else None,
                            filters.parse_sort(opts.sort, ds), opts.output)
    exports = RunExports(ds, config=opts.config, exporter_flag=opts.otel_profiles_exporter,
                         sanitize=opts.sanitize_labels, file_path=opts.file,
                         file_format=opts.output if opts.file else "")
    finished = False
    try:
        code = _sample(opts, config, ds, exports, out, sinks, rules, shape)
        finished = True
        return code
    finally:
        exports.close(write_empty_file=finished)


def _sample(opts: RunOptions, config: EngineConfig, ds, exports: RunExports, out: TextIO,
            sinks: list[ProfileSink] | None, rules: list, shape: "output.RowShape") -> int:
    from ..sampling.engine import Engine

    engine = Engine(config)
    # ig's scope: without --host, only processes in containers (scope.py). Named pids are filtered
    # in the kernel and are in scope whatever they are, so they need no scope filter.
    scoped = not opts.host and not config.pids
    if scoped:
        engine.set_target_filter(ContainerScope(engine.processes).wants)
    engine.start()

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    if interrupted_while_starting():
        stop.set()

    # A whole-host table shows hotstack's own samples as one row unless asked (--show-hotstack).
    own = () if opts.show_hotstack or opts.pids or opts.comms else (os.getpid(),)

    fetches = 0
    in_scope = 0          # samples of processes in scope so far
    hinted = not scoped   # the line telling that --host profiles the host too, printed once

    def emit(profile: Profile) -> None:
        nonlocal fetches, in_scope, hinted
        fetches += 1
        if opts.map_fetch_count and fetches > opts.map_fetch_count:
            return         # the drain at stop, after the last counted fetch
        if opts.map_fetch_count and fetches == opts.map_fetch_count:
            stop.set()     # as ig: the run ends after N fetches
        in_scope += profile.total
        if not hinted and not in_scope and profile.stats.out_of_scope:
            # A host without containers: say why the table is empty rather than print nothing.
            print(scope_hint(profile), file=sys.stderr, flush=True)
            hinted = True
        profile = filters.apply(profile, rules)
        for sink in sinks or ():
            sink(profile)
        exports.emit(profile)
        if out is not None:
            with writing_stdout():
                _render(opts, profile, ds, out, shape, own)

    try:
        engine.run(opts.timeout, opts.map_fetch_interval, on_profile=emit, stop=stop)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        engine.close()
    return 0


def _render(opts: RunOptions, profile: Profile, ds, out: TextIO, shape: "output.RowShape", own) -> None:
    if opts.output == "columns":
        output.render_columns(profile, out, opts.max_rows, own_pids=own)
    elif opts.output in ROW_MODES:
        output.render_rows(profile, ds, out, shape)
    elif opts.output == "folded" and not opts.file:
        output.render_folded_output(profile, out)
    out.flush()
