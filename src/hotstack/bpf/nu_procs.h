/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel unwinder's per-process cache of executable mappings (nu_procs), apart from the
 * unwinder (native_unwind.h) so that mappings.bpf.c, which counts the executable file mappings a
 * process makes, shares the map and the VMA offsets without the unwinder's other maps.
 */
#ifndef HOTSTACK_NU_PROCS_H
#define HOTSTACK_NU_PROCS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "schema.h"

#define NU_VM_EXEC 0x4

/* struct vm_area_struct's offsets (from the kernel's BTF, written by userspace before loading). */
const volatile __u32 nu_off_vma_mm = 16;
const volatile __u32 nu_off_vma_flags = 0;
const volatile __u32 nu_off_vma_file = 0;

/*
 * Per process, its executable mappings, in one of two layouts:
 * - kernels with a VMA tree the program can walk (nu_kernel_vma_walk): a direct-mapped cache,
 *   slot = (pc >> 16) % 64. A miss walks the process's VMA tree (the maple tree of mm->mm_mt)
 *   with plain kernel reads: no lock and no helper that needs one, so it works from the
 *   perf-event interrupt. The cache is emptied when the mm changes (exec). A slot holds only
 *   while the address space's stamp (nu_mm_stamp, and `mapped` before 6.4) is the one it was
 *   read under. A slot read again that finds another file, or another offset of it, where it had
 *   one (a library unloaded and another loaded at its address) queues the process in nu_remap:
 *   userspace's copy of its mappings, which names its addresses, is stale.
 * - the others: userspace writes the mappings from /proc/PID/maps, sorted by start in
 *   r[0..count), and the program searches them. A direct-mapped cache would not do here: two
 *   mappings in one slot (a 1-in-2 chance for a small executable beside libc) would make one of
 *   them unreachable for good. A PC found in none asks userspace for a fresh list (nu_remap).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct nu_ranges);
} nu_procs SEC(".maps");

static __always_inline __u64 nu_kread(__u64 addr, __u32 off)
{
	__u64 value = 0;

	bpf_probe_read_kernel(&value, sizeof(value), (void *)(addr + off));
	return value;
}

#endif
