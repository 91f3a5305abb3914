// SPDX-License-Identifier: GPL-2.0
/*
 * Executable file mappings made, counted in the process's mapping cache (nu_procs.h). Where the
 * kernel has no mm_lock_seq (6.1-6.3), the stamp a cached mapping holds by is made of the mapping
 * and page counts. A library unloaded and another of the same page counts loaded at its address
 * leave those as they were, so the unwinder mixes this count into the stamp (native_unwind.h): the
 * cache is read again and the swap told (nu_remap), not walked with the first file's rules.
 * Those kernels store every VMA into the maple tree through one place, with a tracepoint
 * (vma_store; gone from later kernels, which have mm_lock_seq). Loaded beside a sampler program
 * with its nu_procs map (sampling/sampler.py), only there; apart from it so that the sampler
 * still loads where this can't.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "nu_procs.h"

/* vma_store(struct maple_tree *mt, struct vm_area_struct *vma): a mapping made, moved, grown or
 * split. One made by another task than its process's (a fork's copy of its parent's) is not
 * counted: the cache of a new address space starts empty. */
SEC("tp_btf/vma_store")
int hotstack_mapped(__u64 *ctx)
{
	__u64 vma = ctx[1];
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct nu_ranges *pr;

	if (!(nu_kread(vma, nu_off_vma_flags) & NU_VM_EXEC) || !nu_kread(vma, nu_off_vma_file))
		return 0;
	pr = bpf_map_lookup_elem(&nu_procs, &tgid);
	if (pr && pr->mm && pr->mm == nu_kread(vma, nu_off_vma_mm))
		__sync_fetch_and_add(&pr->mapped, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
