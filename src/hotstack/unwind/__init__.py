"""Native unwinding of user stacks without frame pointers.

Two paths share the .eh_frame tables:

- In the kernel (`--unwind kernel`): kernel_tables.py builds per-file rows keyed by file offset
  (fastcfi.py evaluates every FDE's CFA program at once with numpy; builder.py; Go's .gopclntab
  gives frame-pointer rows), cached on disk by content; kernel_maps.py loads them into the BPF maps
  that bpf/native_unwind.h walks (per-process mapping cache filled from the VMA tree by the program
  itself, tail calls, up to 128 frames). Figures: bench/RESULTS.md, "Unwinding in the kernel".
- In userspace (`--unwind auto|dwarf`, the default today): the BPF program copies 16-20 KB of user
  stack for processes built without frame pointers and Unwinder walks the copy, the way
  `perf --call-graph dwarf` does:
  - cfi.py: .eh_frame / .debug_frame -> rows (CFA rule, saved RBP, return address, stop and
    signal markers, PLT expressions), one opcode at a time;
  - table.py: UnwindTable, the sorted compact form of one file's rows;
  - tables.py: TableStore, tables per mapped file cached per build id (LRU, bounded in bytes);
  - unwinder.py: Unwinder, registers + stack copy -> return addresses.

Measured for the userspace path (bench/unwind.py, 99 Hz): 100% of samples reach the process root
on Debian's python3, a 20-deep -fomit-frame-pointer C chain and xz -9; ~2.5 us of CPU per frame.
The kernel path reaches 98.8-100% on the same kind of workloads (xz from each process's first
sample), keeps the callers of libc leaves in frame-pointer programs, at 2-4 us of BPF time per
sample and no stack copy.

Known limits: x86-64 rules only; CFA expressions other than the PLT one, and a DW_CFA_register
return address (e.g. __vfork), fall back to frame pointers (counted).
"""

from .table import UnwindTable, build_table
from .tables import TableStore
from .unwinder import Unwinder, UnwindStats

__all__ = ["UnwindTable", "build_table", "TableStore", "Unwinder", "UnwindStats"]
