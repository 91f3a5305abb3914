"""arm64 on this x86-64 host: the arm64 BPF objects and the arm64 unwind rules (the VM run of the
smoke suite on an arm64 kernel: `make test-arm64`, tests/kernels/arm64.py)."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hotstack import ebpf
from hotstack.bpf import UnsupportedMachine, object_path
from hotstack.symbols.elf import ElfFile
from hotstack.unwind import cfi
from hotstack.unwind.builder import build_table_fast
from hotstack.unwind.kernel_tables import RA_SAME_K, build_file_table, kernel_rules
from hotstack.unwind.table import build_table

ROOT = Path(__file__).resolve().parent.parent.parent
BPF = ROOT / "src" / "hotstack" / "bpf"
PROGRAMS = sorted(p.name.removesuffix(".bpf.c") for p in BPF.glob("*.bpf.c"))
CROSS_CC = "aarch64-linux-gnu-gcc"          # .ci/install.d/arm64.sh
ARM64_LIBC = "/usr/aarch64-linux-gnu/lib/libc.so.6"


def test_object_path_picks_the_machine_s_object():
    assert object_path("profile", "x86_64").endswith("/profile.bpf.o")
    assert object_path("profile", "aarch64").endswith("/profile.arm64.bpf.o")
    with pytest.raises(UnsupportedMachine, match="riscv64"):
        object_path("profile", "riscv64")


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_has_an_arm64_object_with_the_same_programs_and_maps(name):
    x86 = ebpf.load_spec(object_path(name, "x86_64"), map_prefix="t")
    arm = ebpf.load_spec(object_path(name, "aarch64"), map_prefix="t")
    assert {k: p.section for k, p in arm.programs.items()} == {k: p.section for k, p in x86.programs.items()}
    assert set(arm.maps) == set(x86.maps)
    assert set(arm.variables) == set(x86.variables)
    # not the same bytes: the programs read the registers of another layout (bpf/arch.h); exec's and
    # mappings' read none
    assert Path(object_path(name, "aarch64")).read_bytes() != Path(object_path(name, "x86_64")).read_bytes() \
        or name in ("exec", "mappings")


def _ldx(spec, program: str) -> set[tuple[int, int]]:
    """(source register, offset) of every 8-byte load (BPF_LDX | BPF_MEM | BPF_DW) of a program."""
    raw = spec.programs[program].instructions
    insns = np.frombuffer(bytes(raw), np.dtype([("op", "u1"), ("regs", "u1"), ("off", "<i2"), ("imm", "<i4")]))
    loads = insns[insns["op"] == 0x79]
    return {(int(r) >> 4, int(o)) for r, o in zip(loads["regs"], loads["off"])}


def test_the_arm64_sampler_reads_the_arm64_perf_event_context():
    """profile_cpu reads its context's registers at user_pt_regs offsets on arm64 (pc 256, pstate 264:
    the user-mode test and the walk's start) and at pt_regs offsets on x86-64 (rip 128, cs 136)."""
    arm = _ldx(ebpf.load_spec(object_path("profile", "aarch64"), map_prefix="t"), "profile_cpu")
    x86 = _ldx(ebpf.load_spec(object_path("profile", "x86_64"), map_prefix="t"), "profile_cpu")
    arm_offsets, x86_offsets = {o for _r, o in arm}, {o for _r, o in x86}
    assert {256, 264, 248, 232, 240} <= arm_offsets     # pc, pstate, sp, x29, x30
    assert {128, 136, 152, 32} <= x86_offsets           # rip, cs, rsp, rbp


@pytest.fixture(scope="module")
def arm64_binary(tmp_path_factory) -> ElfFile:
    out = tmp_path_factory.mktemp("arm64") / "hot_ab"
    subprocess.run([CROSS_CC, "-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-o", str(out),
                    str(ROOT / "tests" / "engine" / "workloads" / "hot_ab.c")], check=True)
    return ElfFile(str(out))


def _symbol(elf: ElfFile, name: str) -> int:
    out = subprocess.run(["nm", elf.path], check=True, capture_output=True, text=True).stdout
    return next(int(line.split()[0], 16) for line in out.splitlines() if line.endswith(" " + name))


def test_arm64_rules_return_address_in_lr_at_entry_then_in_the_frame_record(arm64_binary):
    """hot_a: `stp x29, x30, [sp, #-32]!` first. At its entry the CFA is SP and the return address is
    still in x30 (no rule: RA_SAME); after the store, both are in the frame record at CFA-32."""
    assert cfi.arch_of(arm64_binary.machine) is cfi.AARCH64
    table = build_table_fast(arm64_binary)
    entry = _symbol(arm64_binary, "hot_a")
    at_entry, after = table.find(entry), table.find(entry + 4)
    assert (at_entry.kind, at_entry.cfa_offset, at_entry.rbp_offset, at_entry.ra_offset) == \
        (cfi.KIND_CFA_SP, 0, cfi.RBP_SAME, cfi.RA_SAME)
    assert (after.kind, after.cfa_offset, after.rbp_offset, after.ra_offset) == (cfi.KIND_CFA_SP, 32, -32, -24)
    # the kernel's encoding: "in the link register" is NU_RA_SAME (-32768)
    rules = kernel_rules(table)
    assert any(r["ra"] == RA_SAME_K and r["kind"] == cfi.KIND_CFA_SP and r["cfa"] == 0 for r in rules)


@pytest.mark.parametrize("path", [ARM64_LIBC, "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1"])
def test_arm64_fast_builder_matches_the_python_builder(path):
    elf = ElfFile(path)
    slow, fast = build_table(elf), build_table_fast(elf)
    expand = lambda t: [(int(pc), t.rules[i]) for pc, i in zip(t.pcs, t.rule_ids)]  # noqa: E731
    assert len(fast.pcs) > 500 and expand(slow) == expand(fast)
    kinds = {rule.kind for _pc, rule in expand(fast)}
    assert {cfi.KIND_CFA_SP, cfi.KIND_CFA_FP, cfi.KIND_STOP} <= kinds      # clone's or start's STOP
    table = build_file_table(elf)
    assert len(table.rows_u64(np.arange(len(table.rules), dtype=np.int64))) > 500


def test_x86_rules_never_say_the_return_address_is_in_a_register():
    libc = next(iter(sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6"))))
    rules = kernel_rules(build_table_fast(ElfFile(libc)))
    assert len(rules) > 20 and not any(r["ra"] == RA_SAME_K for r in rules)
