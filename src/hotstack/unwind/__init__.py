"""Unwinding: native user stacks without frame pointers, and runtime frame sources.

- runtimes.py: FrameSource, the interface a language runtime implements (CPython in python/),
  and the list of sources the engine builds.

- cfi.py: .eh_frame / .debug_frame -> rows (CFA rule, saved RBP, return address,
  stop and signal markers, PLT expressions).
- table.py: UnwindTable, the sorted compact form of one file's rows.
- tables.py: TableStore, tables per mapped file cached per build id (LRU, bounded in bytes).
- unwinder.py: Unwinder, registers + stack copy -> return addresses.

The choice (figures in bench/RESULTS.md, "Native unwinding"): a hybrid. Frame
pointers stay the default and are walked in the kernel (bpf_get_stackid, in-kernel
aggregation) for processes whose executable keeps them (Go, FP-built distros).
For the others (unwind mode "auto": the executable's .eh_frame shows that its
functions do not set CFA=RBP) the BPF program copies 16-20 KB of user stack into a
ring buffer and this package unwinds it in Python with .eh_frame tables, the way
`perf --call-graph dwarf` does.

Measured (bench/unwind.py, 99 Hz): 100% of samples reach the process root on
Debian's python3, a 20-deep -fomit-frame-pointer C chain and xz -9 (frame pointers:
0%; perf --call-graph dwarf: 100%); top-20 inclusive shares within 0.4 pp of perf's;
the walk costs ~2.5 us of CPU per frame (30-60 us per sample), the copy ~20% more
BPF time than bpf_get_stackid alone; agent CPU per sample 4-7x below perf's; tables
~190 KiB per binary (19 MiB per 100 binaries), parsed once per build id and cached
on disk. In-kernel table unwinding (otel/Parca) would save the copy and the walk
but needs tables in BPF maps, LPM tries and tail calls; at 49-99 Hz the snapshot
path's cost is small next to the agent's fixed cost, so it was not built.

Known limits: x86-64 rules only (the table carries the return-address offset so
that aarch64's LR rules fit, but the parser maps x86 registers); stacks deeper than
the 16-20 KB copy end "truncated"; CFA expressions other than the PLT one, and a
DW_CFA_register return address (e.g. __vfork), fall back to frame pointers.
"""

from .table import UnwindTable, build_table
from .tables import TableStore
from .unwinder import Unwinder, UnwindStats

__all__ = ["UnwindTable", "build_table", "TableStore", "Unwinder", "UnwindStats"]
