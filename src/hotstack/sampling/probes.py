"""The probe sampler: the stack of every hit of a probed function, counted (bpf/probe.bpf.c).

Links are pyroscope.ebpf's (probe_links.py). Uprobes attach to the file, so they fire in every
process that maps it (restricted to the engine's pids if given). Kernel links use the kprobe PMU
where the kernel has kprobes, else an fentry/fexit program on the function's BTF id; if neither
works, start() fails with a message naming the link and the kernel option (never a silent no-op).

The profile is pyroscope.ebpf's `process_cpu:uprobe:count:uprobe:count`.
"""

from __future__ import annotations

import errno

from .. import ebpf
from ..ebpf import links as ebpf_links
from ..errors import ConfigError, HotstackError
from ..profile.model import ValueType
from .config import EngineConfig
from .probe_links import ProbeLink, resolve_uprobe
from .sampler import Sampler

PROBE_SAMPLE_TYPE = ValueType("uprobe", "count")
PROBE_PROFILE_NAME = "process_cpu"


class ProbeSampler(Sampler):
    object_name = "probe"
    map_prefix = "hsprobe"
    profile_name = PROBE_PROFILE_NAME
    sample_type = PROBE_SAMPLE_TYPE
    period_type = PROBE_SAMPLE_TYPE

    def __init__(self, config: EngineConfig) -> None:
        if not config.probe_links:
            raise ConfigError("no probe links given")
        super().__init__(config)
        # Bad links fail here, before anything is loaded.
        self._uprobes = {link: resolve_uprobe(link) for link in config.probe_links if link.is_user}

    def start(self) -> None:
        spec = self.spec()
        templates = {kind: spec.programs.pop(f"probe_{kind}") for kind in ("fentry", "fexit")}
        self.native_spec(spec, "probe_native_step")

        def attach_all() -> None:
            for link in self.config.probe_links:
                self._links.append(self._attach(link, templates))     # (each kept at once: close() detaches it)
        self.load_and_start(spec, "probe_native_step", attach_all)

    def _attach(self, link: ProbeLink, templates: dict[str, ebpf.ProgramSpec]) -> ebpf_links.Link:
        programs = self.collection.programs
        if link.is_user:
            target = self._uprobes[link]
            try:
                return ebpf_links.attach_uprobe(programs[f"probe_{link.kind}"], target.path, target.offset,
                                                retprobe=link.is_return)
            except ebpf.EbpfError as e:
                raise HotstackError(f"probe link {link.text!r}: cannot attach ({e})") from None
        if ebpf_links.pmu_available("kprobe"):
            try:
                return ebpf_links.attach_kprobe(programs["probe_kprobe"], link.symbol, retprobe=link.is_return)
            except ebpf.SyscallError as e:
                if e.errno == errno.ENOENT:
                    raise ConfigError(f"probe link {link.text!r}: the kernel has no function {link.symbol!r}") from None
                raise HotstackError(f"probe link {link.text!r}: cannot attach ({e})") from None
        return self._attach_tracing(link, templates["fexit" if link.is_return else "fentry"])

    def _attach_tracing(self, link: ProbeLink, template: ebpf.ProgramSpec) -> ebpf_links.Link:
        """kprobe links on kernels without kprobes: fentry/fexit through the kernel's BTF."""
        kind = "fexit" if link.is_return else "fentry"
        lacking = f"probe link {link.text!r}: this kernel has no kprobes (CONFIG_KPROBES is off)"
        try:
            variant = ebpf_links.tracing_variant(template, link.symbol)
        except FileNotFoundError:
            raise HotstackError(f"{lacking} and no BTF for a {kind} fallback (CONFIG_DEBUG_INFO_BTF): "
                                f"build the kernel with CONFIG_KPROBES=y") from None
        except KeyError:
            raise HotstackError(f"{lacking}, and its BTF has no function {link.symbol!r} to attach {kind} to: "
                                f"check the name, or build the kernel with CONFIG_KPROBES=y") from None
        try:
            program = self.collection.load_program(f"{kind}:{link.symbol}", variant)
            return ebpf_links.attach_tracing(program)
        except ebpf.EbpfError as e:
            reason = e.short() if isinstance(e, ebpf.VerifierError) else str(e).rsplit(": ", 1)[-1]
            raise HotstackError(f"{lacking}, and the {kind} fallback on {link.symbol} was refused ({reason}): "
                                f"build the kernel with CONFIG_KPROBES=y, or allow BPF trampolines "
                                f"(CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, no lockdown)") from None
