"""Native unwinding of user stacks without frame pointers.

- cfi.py: .eh_frame / .debug_frame -> rows (CFA rule, saved RBP, return address,
  stop and signal markers, PLT expressions).
- table.py: UnwindTable, the sorted compact form of one file's rows.
- tables.py: TableStore, tables per mapped file cached per build id (LRU, bounded in bytes).
- unwinder.py: Unwinder, registers + stack copy -> return addresses.

The choice (figures in bench/RESULTS.md, "Native unwinding"): a hybrid. Frame
pointers stay the default and are walked in the kernel (bpf_get_stackid, in-kernel
aggregation) for processes whose executable keeps them (Go, FP-built distros).
For the others the BPF program copies 16-20 KB of user stack into a ring buffer
and this package unwinds it in Python with .eh_frame tables, the way
`perf --call-graph dwarf` does. In-kernel table unwinding (otel/Parca) is cheaper
per sample but needs tables in BPF maps, LPM tries and tail calls; the snapshot
path reached the same completeness as perf's at a per-sample cost that is fine for
a tool at 49-99 Hz.
"""

from .table import UnwindTable, build_table
from .tables import TableStore
from .unwinder import Unwinder, UnwindStats

__all__ = ["UnwindTable", "build_table", "TableStore", "Unwinder", "UnwindStats"]
