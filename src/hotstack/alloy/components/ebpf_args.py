"""pyroscope.ebpf arguments: the schema, and ONE table of what hotstack supports of each.

`CAPABILITIES` maps an argument to a probe that says whether the engine can honour a
non-default value; wiring a new engine capability is a change of one line there.
"""

from __future__ import annotations

import importlib

from ...errors import ConfigError
from ...sampling.config import DEMANGLE_MODES
from ..schema import BOOL, DURATION, FLOAT, INT, STRING, TARGETS, Arg, BlockArg, CapsuleOf, ListOf, Schema

COMM_MODES = ("none", "label", "stackframe", "both")


def _has(module: str, attr: str = "") -> bool:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    return not attr or hasattr(mod, attr)


def _engine_field(name: str) -> bool:
    from ...sampling.config import EngineConfig
    return name in EngineConfig.__dataclass_fields__


# argument -> (is the capability there?, what is missing). A non-default value of an argument
# whose capability is missing is rejected with "<argument>: not supported yet".
CAPABILITIES = {
    "python_enabled": (lambda: _engine_field("runtime_frames"), "Python frames in the sampler"),
    "v8_enabled": (lambda: _engine_field("runtimes_off"), "JavaScript frames in the sampler"),
    "ruby_enabled": (lambda: _engine_field("runtimes_off"), "Ruby frames in the sampler"),
    "php_enabled": (lambda: _engine_field("runtimes_off"), "PHP frames in the sampler"),
    "hotspot_enabled": (lambda: _engine_field("runtimes_off"), "Java frames in the sampler"),
    "perl_enabled": (lambda: _engine_field("runtimes_off"), "Perl frames in the sampler"),
    "demangle": (lambda: _has("hotstack.symbols.demangle", "Demangler"), "C++ demangling"),
    "off_cpu_threshold": (lambda: _has("hotstack.sampling.offcpu", "OffCpuSampler"), "off-CPU sampling"),
    "probe_links": (lambda: _has("hotstack.sampling.probes", "ProbeSampler"), "probe-triggered sampling"),
    "u_probe_links": (lambda: _has("hotstack.sampling.probes", "ProbeSampler"), "probe-triggered sampling"),
    "load_probe": (lambda: False, "generic probe program for others to attach"),
    "symb_cache_path": (lambda: False, "on-disk symbol cache"),
    "symb_cache_size": (lambda: False, "on-disk symbol cache"),
    "debug_info.upload": (lambda: False, "debug-info upload"),
    "debug_info.on_target_symbolization": (lambda: False, "backend-only symbolization"),
}

# EngineConfig fields as pyroscope.ebpf names them, for error messages.
ARG_NAMES = {"frequency": "sample_rate", "off_cpu_threshold": "off_cpu_threshold", "demangle": "demangle",
             "kernel_stacks": "kernel_frames", "user_stacks": "user stacks"}


def engine_config(a: dict):
    """The engine's config for these arguments (validated)."""
    from ...sampling.config import EngineConfig
    from ...sampling.obi import ObiConfig
    from ...sampling.probe_links import parse_probe_links
    obi = ObiConfig(enabled=a["obi_process_context_enabled"], bpf_fs_root=a["bpf_fs_root"]) \
        if OBI_AVAILABLE() else None
    return EngineConfig(frequency=a["sample_rate"], kernel_stacks=a["kernel_frames"],
                        runtime_frames=(a["python_enabled"] or a["v8_enabled"] or a["ruby_enabled"] or a["php_enabled"]
                                        or a["hotspot_enabled"] or a["perl_enabled"]),
                        runtimes_off=tuple(name for name, arg in (("python", "python_enabled"), ("v8", "v8_enabled"),
                                                                  ("ruby", "ruby_enabled"), ("php", "php_enabled"),
                                                                  ("hotspot", "hotspot_enabled"), ("perl", "perl_enabled"))
                                           if not a[arg]),
                        off_cpu_threshold=a["off_cpu_threshold"],
                        probe_links=tuple(parse_probe_links(a["probe_links"], a["u_probe_links"])),
                        obi=obi, demangle=a["demangle"], go_symbols=a["go_enabled"],
                        kernel_version_check=not a["no_kernel_version_check"],
                        pids_at_run_time=a["targets_only"]).validate(ARG_NAMES)


# Trace correlation is on by default in Alloy and only does something when an OBI/Beyla
# process-context map exists under bpf_fs_root; without the capability `true` is accepted
# with one warning at start (see PyroscopeEbpf.start), `false` is what already happens.
OBI_AVAILABLE = lambda: _has("hotstack.sampling.obi", "ObiConfig")  # noqa: E731

# Interpreter unwinders hotstack does not have. Alloy turns them on by default, so refusing
# `true` would fail every seed config: `true` is accepted with one warning at start (their
# frames stay native frames of the interpreter), `false` is what already happens.
NO_UNWINDER = ("dotnet_enabled",)

# debug_info settings of Alloy's debug-info uploader (its cache of uploaded build ids, its
# queue, its workers, stripping .text before upload). hotstack does not upload debug info
# (upload = true is refused), so a non-default value changes nothing: one warning at start.
UPLOAD_ONLY = ("cache_size", "strip_text_section", "queue_size", "worker_num")


def start_warnings(a: dict) -> list[str]:
    """One line per group of arguments that are accepted but cannot act here, with the reason."""
    warnings = []
    runtimes = [name for name in NO_UNWINDER if a[name]]
    if runtimes:
        warnings.append(f"{', '.join(runtimes)}: not supported yet (hotstack has no unwinder for these runtimes;"
                        f" their processes are profiled as native code); set them to false to silence this")
    defaults = DEBUG_INFO.defaults()
    changed = [f"debug_info.{name}" for name in UPLOAD_ONLY if a["debug_info"][name] != defaults[name]]
    if changed:
        warnings.append(f"{', '.join(changed)}: no effect (they configure debug-info upload, which hotstack "
                        f"does not do)")
    return warnings


DEPRECATED = {name: f"argument {name!r} is deprecated and has no effect; remove it" for name in (
    "pid_cache_size", "build_id_cache_size", "same_file_cache_size", "cache_rounds", "go_table_fallback",
    "symbols_map_size", "pid_map_size", "collect_user_profile", "collect_kernel_profile",
    "container_id_cache_size")}

DEBUG_INFO = Schema([
    Arg("on_target_symbolization", BOOL, True), Arg("upload", BOOL, False), Arg("cache_size", INT, 262144),
    Arg("strip_text_section", BOOL, False), Arg("queue_size", INT, 256), Arg("worker_num", INT, 16),
])


def _validate(a: dict) -> None:
    if a["comm"] not in COMM_MODES:
        raise ValueError(f"comm: {a['comm']!r} is not one of {', '.join(COMM_MODES)}")
    if a["demangle"] not in DEMANGLE_MODES:
        raise ValueError(f"demangle: {a['demangle']!r} is not one of {', '.join(DEMANGLE_MODES)}")
    if a["collect_interval"] <= 0:
        raise ValueError("collect_interval must be greater than 0")
    try:   # the engine's own rules (sample rate, threshold, probe links), with Alloy's names
        engine_config(a)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    defaults = SCHEMA.defaults()
    for name, (available, what) in CAPABILITIES.items():
        block, _, field = name.partition(".")
        value, default = (a[block][field], defaults[block][field]) if field else (a[name], defaults[name])
        if value != default and not available():
            raise ValueError(f"{name}: not supported yet (hotstack has no {what})")


SCHEMA = Schema([
    Arg("forward_to", ListOf(CapsuleOf("ProfilesReceiver")), required=True),
    Arg("targets", TARGETS, []),
    Arg("collect_interval", DURATION, 15.0),
    Arg("sample_rate", INT, 19),
    *(Arg(f"{lang}_enabled", BOOL, True) for lang in ("python", "perl", "php", "hotspot", "ruby", "v8",
                                                       "dotnet", "go")),
    Arg("demangle", STRING, "none"),
    Arg("off_cpu_threshold", FLOAT, 0.0),
    Arg("bpf_fs_root", STRING, "/sys/fs/bpf/"),
    Arg("obi_process_context_enabled", BOOL, True),
    Arg("load_probe", BOOL, False),
    Arg("probe_links", ListOf(STRING), []),
    Arg("u_probe_links", ListOf(STRING), []),   # deprecated form: used only when probe_links is empty
    Arg("verbose_mode", BOOL, False),
    Arg("lazy_mode", BOOL, False),
    Arg("no_kernel_version_check", BOOL, False),
    Arg("comm", STRING, "none"),
    Arg("pid_label", BOOL, False),
    Arg("kernel_frames", BOOL, True),
    Arg("targets_only", BOOL, True),
    Arg("symb_cache_path", STRING, "/tmp/symb-cache"),
    Arg("symb_cache_size", INT, 2048),
    Arg("reporter_unsymbolized_stubs", BOOL, False),
    BlockArg("debug_info", DEBUG_INFO),
], validate=_validate, deprecated=DEPRECATED)
