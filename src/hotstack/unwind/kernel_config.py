"""The kernel unwinder's load-time settings (bpf/native_unwind.h, bpf/mappings.bpf.c), from the
kernel's BTF: struct offsets, map sizes, and how PCs are mapped to files. Where the kernel keeps
VMAs in a maple tree (6.1+) the program walks it itself on a cache miss; elsewhere userspace fills
each process's mapping list (ProcessMappings.write).
"""

from __future__ import annotations

from ..bpf import schema
from ..ebpf.btf import kernel_btf
from ..ebpf.links import btf_target_id
from ..ebpf.maps import BPF_F_MMAPABLE, possible_cpus

MAPPED_PROGRAM = "hotstack_mapped"   # bpf/mappings.bpf.c
# 32 MiB of rows: ~120 files the size of libc, hundreds of small ones, or one large C++ library
# (libLLVM: 1M rows) with room beside it for the rest of a developer host.
DEFAULT_ROWS = 1 << 22


def has_maple_tree() -> bool:
    try:
        btf = kernel_btf()
        btf.member_offset("mm_struct", "mm_mt")
        btf.member_offset("maple_range_64", "slot")
        return True
    except (KeyError, OSError):
        return False


def has_mm_lock_seq() -> bool:
    """Whether the kernel stamps every change of an address space (mm_struct.mm_lock_seq, 6.4+);
    before it the unwinder's mapping cache needs a count of the mappings made (configure_mapped)."""
    try:
        kernel_btf().member_offset("mm_struct", "mm_lock_seq")
        return True
    except (KeyError, OSError):
        return False


def configure_mapped(spec) -> None:
    """bpf/mappings.bpf.c's struct offsets (what configure writes for the same names) and its
    tracepoint (KeyError where the kernel has none: from 6.4 on, which have mm_lock_seq)."""
    btf = kernel_btf()
    for name, member in (("nu_off_vma_mm", "vm_mm"), ("nu_off_vma_flags", "vm_flags"),
                         ("nu_off_vma_file", "vm_file")):
        spec.set_constant(name, btf.member_offset("vm_area_struct", member))
    spec.programs[MAPPED_PROGRAM].attach_btf_id = btf_target_id("tp_btf", "vma_store", btf)


def configure(spec, rows: int = DEFAULT_ROWS, kernel_vma_walk: bool | None = None) -> bool:
    """Write the unwinder's .rodata constants and map sizes into `spec`; True if the kernel builds the
    mapping lists itself (else userspace must call write_process for each process)."""
    walk = has_maple_tree() if kernel_vma_walk is None else kernel_vma_walk
    btf = kernel_btf()
    offsets = {
        "nu_off_vma_mm": ("vm_area_struct", "vm_mm"),
        "nu_off_range_pivot": ("maple_range_64", "pivot"),
        "nu_off_range_slot": ("maple_range_64", "slot"),
        "nu_off_arange_slot": ("maple_arange_64", "slot"),
        "nu_off_vma_start": ("vm_area_struct", "vm_start"),
        "nu_off_vma_end": ("vm_area_struct", "vm_end"),
        "nu_off_vma_flags": ("vm_area_struct", "vm_flags"),
        "nu_off_vma_pgoff": ("vm_area_struct", "vm_pgoff"),
        "nu_off_vma_file": ("vm_area_struct", "vm_file"),
        "nu_off_file_inode": ("file", "f_inode"),
        "nu_off_inode_ino": ("inode", "i_ino"),
        "nu_off_inode_sb": ("inode", "i_sb"),
        "nu_off_sb_dev": ("super_block", "s_dev"),
        "nu_off_task_mm": ("task_struct", "mm"),
    }
    for name, (struct_name, member) in offsets.items():
        try:
            spec.set_constant(name, btf.member_offset(struct_name, member))
        except KeyError:
            walk = False
    try:
        spec.set_constant("nu_off_mm_root", btf.member_offset("mm_struct", "mm_mt")
                          + btf.member_offset("maple_tree", "ma_root"))
    except KeyError:
        pass      # no maple tree: the walk is off
    if has_mm_lock_seq():
        spec.set_constant("nu_off_mm_seq", btf.member_offset("mm_struct", "mm_lock_seq"))
    else:   # before 6.4: the mapping cache's stamp is made of the mapping and page counts
        try:
            stamp = {name: btf.member_offset("mm_struct", member) for name, member in
                     (("nu_off_mm_map_count", "map_count"), ("nu_off_mm_total_vm", "total_vm"),
                      ("nu_off_mm_exec_vm", "exec_vm"))}
        except KeyError:
            stamp = {}   # (none of them: a slot lives until exec)
        for name, offset in stamp.items():
            spec.set_constant(name, offset)
    try:   # the vDSO's mapping, whose code has its table under VDSO_KEY (symbols/vdso.py)
        spec.set_constant("nu_off_mm_vdso", btf.member_offset("mm_struct", "context.vdso"))
    except KeyError:
        pass
    try:   # where the kernel has no bpf_task_pt_regs (before 5.15): the top of a task's stack
        spec.set_constant("nu_off_task_stack", btf.member_offset("task_struct", "stack"))
    except KeyError:
        pass
    spec.set_constant("nu_kernel_vma_walk", int(walk))
    spec.maps["nu_rule_cache"].max_entries = schema.NU_RULE_CACHE_SLOTS * possible_cpus()   # each CPU its own slots
    spec.maps["nu_rows"].max_entries = rows
    # rows are written through a shared mapping of the array: a table of 500k rows took ~0.5 s
    # of kernel time as a batch update (the kernel updates element by element), a copy takes ms
    spec.maps["nu_rows"].flags |= BPF_F_MMAPABLE
    return walk
