"""Load-time adaptations of a CollectionSpec to the running kernel, decided by feature probes.

The committed objects are built for the newest kernels. Where an older kernel needs another
form, the loader rewrites the spec just before loading, and says what it changed:
- hash maps that perf_event programs use are preallocated where the kernel refuses
  BPF_F_NO_PREALLOC there (before 6.1);
- a call to a helper in NULL_SAFE_HELPERS that the kernel lacks becomes `r0 = 0`: the calling
  code treats 0 as "not available" and takes its fallback path (see the table for each one).
A program that calls any other helper the kernel lacks fails with MissingHelperError: one line
naming the helper and the Linux release that brings it, never a verifier dump.
"""

from __future__ import annotations

import copy
import struct
from dataclasses import dataclass

from . import features
from .errors import VerifierError
from .spec import BPF_CALL, CollectionSpec, ProgramSpec

MAP_HASH, MAP_PERCPU_HASH = 1, 5
PROG_PERF_EVENT = 7

# Helpers whose every caller in src/hotstack/bpf/ handles a 0 result as "not available":
#   bpf_task_pt_regs: native_count.h native_task_user_regs() returns -1 for a NULL regs pointer,
#     and the sample (or switch-out) keeps its frame-pointer user stack instead of a walk;
#   bpf_get_current_task_btf: its only use is as bpf_task_pt_regs' argument (stubbed with it).
NULL_SAFE_HELPERS = ("bpf_task_pt_regs", "bpf_get_current_task_btf")


class MissingHelperError(VerifierError):
    """A program needs a helper this kernel lacks."""

    def __init__(self, program: str, err: int, log: str, helper: features.Helper) -> None:
        super().__init__(program, err, log)
        self.helper = helper
        since = f" (Linux {helper.since}+)" if helper.since != "?" else ""
        self.args = (f"program {program!r} needs {helper.name}{since}, which this kernel lacks",)

    def short(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Adaptation:
    what: str      # e.g. "map py_stacks_0 preallocated"
    why: str       # the feature this kernel lacks

    def __str__(self) -> str:
        return f"{self.what}: {self.why}"


def adapt(spec: CollectionSpec) -> tuple[CollectionSpec, list[Adaptation]]:
    """A copy of `spec` fit for this kernel, and what was changed (empty: the spec as it was)."""
    changes: list[Adaptation] = []
    out = spec
    perf_maps = {key for p in spec.programs.values() if p.prog_type == PROG_PERF_EVENT
                 for _index, key, extra in p.map_relocations if extra is None}
    dynamic = [key for key in sorted(perf_maps) if key in spec.maps
               and spec.maps[key].type in (MAP_HASH, MAP_PERCPU_HASH)
               and spec.maps[key].flags & features.BPF_F_NO_PREALLOC]
    if dynamic and not features.perf_event_dynamic_hash():
        out = copy.deepcopy(spec)
        for key in dynamic:
            out.maps[key].flags &= ~features.BPF_F_NO_PREALLOC
        changes.append(Adaptation(f"maps {', '.join(dynamic)} preallocated",
                                  "this kernel's perf_event programs need preallocated hash maps (6.1 lifted that)"))
    for name in spec.programs:
        program, stubbed = _stub_missing_helpers(spec.programs[name])
        if not stubbed:
            continue
        if out is spec:
            out = copy.deepcopy(spec)
        out.programs[name] = program
        changes.extend(stubbed)
    return out, changes


def adapt_program(prog: ProgramSpec) -> ProgramSpec:
    """One program fitted to this kernel (for programs loaded into a collection later)."""
    return _stub_missing_helpers(prog)[0]


def _stub_missing_helpers(prog: ProgramSpec) -> tuple[ProgramSpec, list[Adaptation]]:
    changes = []
    for helper_name in NULL_SAFE_HELPERS:
        helper = features.HELPERS[helper_name]
        # Probed as a perf_event program: a probe program of a tracing type (tp_btf, fentry) cannot
        # load without an attach target, and these helpers come to every tracing type at once. The
        # probe is cached: the program's instructions are scanned only on a kernel that lacks it.
        if features.helper_available(helper_name, PROG_PERF_EVENT):
            continue
        calls = _helper_calls(prog.instructions, helper.id)
        if not calls:
            continue
        if not changes:
            prog = copy.deepcopy(prog)
        for index in calls:
            struct.pack_into("<BBhi", prog.instructions, index * 8, 0xb7, 0, 0, 0)   # r0 = 0
        changes.append(Adaptation(f"{prog.name}: {helper_name} returns NULL",
                                  f"this kernel lacks it (Linux {helper.since}+)"))
    return prog, changes


def _helper_calls(insns: bytes | bytearray, helper_id: int) -> list[int]:
    """Indexes of `call helper_id` instructions (src_reg 0: a helper, not a BPF-to-BPF call)."""
    found = []
    for index in range(len(insns) // 8):
        code, regs, _off, imm = struct.unpack_from("<BBhi", insns, index * 8)
        if code == BPF_CALL and regs >> 4 == 0 and imm == helper_id:
            found.append(index)
    return found


def explain_verifier_error(error: VerifierError) -> VerifierError:
    """MissingHelperError if the log says the kernel lacks a helper, else the error as it was."""
    helper = features.unknown_helper(error.log)
    if helper is None:
        return error
    return MissingHelperError(error.program, error.errno, error.log, helper)


__all__ = ["Adaptation", "MissingHelperError", "NULL_SAFE_HELPERS", "adapt", "adapt_program", "explain_verifier_error"]
