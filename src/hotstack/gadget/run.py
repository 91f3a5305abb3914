"""`hotstack run profile_cpu`: wire flags to the engine and the renderers."""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, TextIO

from ..errors import ConfigError
from ..profile.model import Profile
from ..sampling.diagnose import check_preconditions, explain
from ..sampling.profiler import CpuProfiler
from ..sampling.session import SamplerConfig
from . import output
from .exports import RunExports
from .profile_cpu import rows_from_profile, samples_datasource

OUTPUT_MODES = ("columns", "json", "folded", "pprof", "flamegraph", "none")
FILE_MODES = ("pprof", "flamegraph", "folded")   # -o MODE --file PATH


@dataclass
class RunOptions:
    timeout: float = 0
    sample_rate: int = 49
    map_fetch_interval: float = 0
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
    unwind: str = "auto"     # auto | fp | dwarf (hotstack.unwind)
    python_enabled: bool = True   # Python frames in place of the interpreter's (unwind/python)

    def validate(self) -> None:
        if not 1 <= self.sample_rate <= 1000:
            raise ConfigError(f"--sample-rate {self.sample_rate}: must be between 1 and 1000 Hz")
        if self.timeout < 0:
            raise ConfigError("--timeout must be 0 (until Ctrl-C) or a positive number of seconds")
        if self.map_fetch_interval < 0:
            raise ConfigError("--map-fetch-interval must be 0 or a positive duration")
        if self.kernel_stacks_only and self.user_stacks_only:
            raise ConfigError("--kernel-stacks-only and --user-stacks-only exclude each other")
        if self.output not in OUTPUT_MODES:
            raise ConfigError(f"-o {self.output}: expected one of {', '.join(OUTPUT_MODES)}")
        if self.output in ("pprof", "flamegraph") and not self.file:
            raise ConfigError(f"-o {self.output} writes a file: add --file PATH")
        if self.file and self.output not in FILE_MODES:
            raise ConfigError(f"--file goes with -o {', '.join(FILE_MODES)} (not -o {self.output})")

    def sampler_config(self) -> SamplerConfig:
        return SamplerConfig(frequency=self.sample_rate, pids=self.pids, comms=self.comms,
                             include_idle=self.include_idle, user_stacks=not self.kernel_stacks_only,
                             kernel_stacks=not self.user_stacks_only, unwind=self.unwind,
                             python_enabled=self.python_enabled)


ProfileSink = Callable[[Profile], None]


def run_profile_cpu(opts: RunOptions, out: TextIO = sys.stdout, sinks: list[ProfileSink] | None = None, *,
                    datasource=None, make_profiler=None) -> int:
    """Run a profiling gadget: profile_cpu by default; other gadgets pass their datasource and a
    `make_profiler(processes, symbolizer)` returning an engine with start/run/close (e.g. EventProfiler)."""
    opts.validate()
    ds = datasource or samples_datasource(opts.sample_rate)
    ds.annotate(opts.annotations)
    exports = RunExports(ds, config=opts.config, exporter_flag=opts.otel_profiles_exporter,
                         sanitize=opts.sanitize_labels, file_path=opts.file,
                         file_format=opts.output if opts.file else "")
    finished = False
    try:
        code = _sample(opts, ds, exports, out, sinks, make_profiler)
        finished = True
        return code
    finally:
        exports.close(write_empty_file=finished)


def _sample(opts: RunOptions, ds, exports: RunExports, out: TextIO, sinks: list[ProfileSink] | None,
            make_profiler=None) -> int:
    check_preconditions()
    from ..procs import ProcessTable
    from ..symbols.symbolizer import Symbolizer

    processes = ProcessTable()
    symbolizer = Symbolizer(processes, demangle=opts.demangle)
    profiler = make_profiler(processes, symbolizer) if make_profiler else CpuProfiler(
        opts.sampler_config(), processes=processes, symbolizer=symbolizer)
    try:
        profiler.start()
    except Exception as e:  # loader failures become one line
        profiler.close()
        raise explain(e) from None

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}

    def emit(profile: Profile) -> None:
        for sink in sinks or ():
            sink(profile)
        rows = rows_from_profile(profile) if exports.wants_rows or opts.output == "json" else None
        exports.emit(profile, rows)
        if opts.output == "columns":
            output.render_columns(profile, out, opts.max_rows)
        elif opts.output == "json":
            output.render_json(ds, rows, out)
        elif opts.output == "folded" and not opts.file:
            output.render_folded_output(profile, out)
        out.flush()

    try:
        profiler.run(opts.timeout, opts.map_fetch_interval, on_profile=emit, stop=stop)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        profiler.close()
    return 0
