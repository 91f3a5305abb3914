"""pyroscope.ebpf arguments: the schema, and ONE table of what hotstack supports of each.

`CAPABILITIES` maps an argument to a probe that says whether the engine can honour a
non-default value; wiring a new engine capability is a change of one line there.
"""

from __future__ import annotations

import importlib

from ..schema import BOOL, DURATION, FLOAT, INT, STRING, TARGETS, Arg, BlockArg, CapsuleOf, ListOf, Schema

COMM_MODES = ("none", "label", "stackframe", "both")
DEMANGLE_MODES = ("none", "simplified", "templates", "full")


def _has(module: str, attr: str = "") -> bool:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    return not attr or hasattr(mod, attr)


def _sampler_field(name: str) -> bool:
    from ...sampling.session import SamplerConfig
    return name in SamplerConfig.__dataclass_fields__


# argument -> (is the capability there?, what is missing). A non-default value of an argument
# whose capability is missing is rejected with "<argument>: not supported yet".
CAPABILITIES = {
    "python_enabled": (lambda: _sampler_field("python_enabled"), "Python frames in the sampler"),
    "demangle": (lambda: _has("hotstack.symbols.demangle", "Demangler"), "C++ demangling"),
    "off_cpu_threshold": (lambda: _has("hotstack.sampling.offcpu", "OffCpuProfiler"), "off-CPU sampling"),
    "probe_links": (lambda: _has("hotstack.sampling.probes", "ProbeProfiler"), "probe-triggered sampling"),
    "u_probe_links": (lambda: _has("hotstack.sampling.probes", "ProbeProfiler"), "probe-triggered sampling"),
    "load_probe": (lambda: False, "a generic probe program for others to attach"),
    "symb_cache_path": (lambda: False, "an on-disk symbol cache"),
    "symb_cache_size": (lambda: False, "an on-disk symbol cache"),
    "debug_info.upload": (lambda: False, "debug-info upload"),
    "debug_info.on_target_symbolization": (lambda: False, "backend-only symbolization"),
}

# Trace correlation is on by default in Alloy and only does something when an OBI/Beyla
# process-context map exists under bpf_fs_root; without the capability `true` is accepted
# with one warning at start (see PyroscopeEbpf.start), `false` is what already happens.
OBI_AVAILABLE = lambda: _has("hotstack.sampling.obi", "ObiConfig")  # noqa: E731

# Interpreter unwinders hotstack does not have: turning them off (false) is what already
# happens, so false is honoured; their default (true) is accepted as "on where available".
NO_UNWINDER = ("perl_enabled", "php_enabled", "hotspot_enabled", "ruby_enabled", "v8_enabled", "dotnet_enabled")

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
    if not 0 <= a["off_cpu_threshold"] <= 1:
        raise ValueError("off_cpu_threshold must be between 0 and 1")
    if not 1 <= a["sample_rate"] <= 10000:
        raise ValueError("sample_rate must be between 1 and 10000")
    if a["collect_interval"] <= 0:
        raise ValueError("collect_interval must be greater than 0")
    for link in a["probe_links"] or [f"uprobe:{u}" for u in a["u_probe_links"]]:
        kind, _, rest = link.partition(":")
        if kind not in ("kprobe", "kretprobe", "uprobe", "uretprobe") or not rest or (
                kind.startswith("u") and ":" not in rest):
            raise ValueError(f"probe_links: {link!r} must be kprobe:SYMBOL, kretprobe:SYMBOL, "
                             "uprobe:/path:SYMBOL or uretprobe:/path:SYMBOL")
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
