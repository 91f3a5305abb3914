"""Native unwinding of user stacks without frame pointers, in the kernel.

Userspace builds per-file tables; bpf/native_unwind.h walks them in the kernel:
- cfi.py: .eh_frame / .debug_frame records and CFA programs (the shared walk, cfi.records);
- fastcfi.py + builder.py: every FDE's CFA program evaluated at once with numpy -> an UnwindTable
  (cfi_headers.py: the FDEs located; cfi_decode.py: their instructions; cfi_state.py: the rules at
  each row; cfi_rows.py: rows in compact columns. table.py: the sorted compact form of one file's
  rows; table.build_table is the one-opcode-at-a-time reference builder the tests compare with);
- kernel_tables.py: rows keyed by file offset with rule ids (Go's .gopclntab gives frame-pointer
  rows), cached on disk by content;
- kernel_maps.py: loads them into the BPF maps the program walks (NativeTables), with
  row_arena.py (the one arena of rows), queued_files.py (the files the kernel met without a table),
  kernel_files.py (files by inode and the kernel's device number, opened and checked) and
  process_mappings.py (each process's mapping list: filled from the VMA tree by the program itself,
  or by userspace on kernels without a maple tree);
- kernel_config.py: the program's settings before loading, from the kernel's BTF.

bench/RESULTS.md ("Unwinding in the kernel") has the share of samples that reach the process root
and the BPF time per sample, against `perf --call-graph dwarf`. Stacks are unwound in the kernel, not copied to userspace and unwound there (as `perf --call-graph
dwarf` does): that copy is 16-20 KB of user stack per sample, and costs several times the memory.

Known limits: CFA expressions other than the PLT one, and a DW_CFA_register return address (e.g.
__vfork), fall back to frame pointers (counted).
"""
