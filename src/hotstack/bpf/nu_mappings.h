/* SPDX-License-Identifier: GPL-2.0 */
/*
 * PC -> executable mapping, for the native unwinder (included by native_unwind.h).
 *
 * nu_procs, an LRU hash tgid -> struct nu_ranges, is a per-process cache of the executable mappings
 * met so far. On a miss the program walks the process's VMA tree itself (mm->mm_mt, the maple tree
 * of kernels 6.1+, read with bpf_probe_read_kernel; offsets from the kernel's BTF, chosen at load
 * time: `nu_kernel_vma_walk`), so a process is unwound from its first sample with no per-process
 * work in userspace. Neither helper made for this works from the perf-event interrupt. bpf_find_vma
 * (5.17+) releases the mmap lock through a per-CPU irq_work that stays busy until the interrupt
 * returns, so only one call per sample succeeds; the task-VMA iterator kfuncs refuse any context
 * with interrupts off (EBUSY). Where the tree cannot be walked (older kernels) userspace fills the
 * same cache from /proc/PID/maps (mm = 0: kept as written).
 */
#ifndef HOTSTACK_NU_MAPPINGS_H
#define HOTSTACK_NU_MAPPINGS_H

#include "nu_maps.h"

/* How a queued request (a file without a table, a stale mapping list) wakes userspace: the
 * includer's pids.h defines it; a harness without one polls. */
#ifndef NU_WAKE_USERSPACE
#define NU_WAKE_USERSPACE() do { } while (0)
#endif

#define NU_PAGE_SHIFT 12

static __always_inline __u64 nu_current_mm(void)
{
	return nu_kread((__u64)bpf_get_current_task(), nu_off_task_mm);
}

/* The file behind a VMA: inode number and the kernel's dev_t (0, 0: anonymous memory). */
static __always_inline void nu_vma_file(__u64 vma, struct nu_range *out)
{
	__u64 file = nu_kread(vma, nu_off_vma_file), inode;

	out->ino = 0;
	out->dev = 0;
	if (!file)
		return;
	inode = nu_kread(file, nu_off_file_inode);
	if (!inode)
		return;
	out->ino = nu_kread(inode, nu_off_inode_ino);
	out->dev = (__u32)nu_kread(nu_kread(inode, nu_off_inode_sb), nu_off_sb_dev);
}

#define NU_MAPLE_LEVELS 8
#define NU_MAPLE_PIVOTS 15

/* The executable VMA holding pc, found by walking mm's maple tree; -1 if none. */
static __always_inline int nu_maple_find(__u64 mm, __u64 pc, struct nu_range *out)
{
	__u64 entry = nu_kread(mm, nu_off_mm_root), vma;
	__u64 piv[NU_MAPLE_PIVOTS];
	int level;

	for (level = 0; level < NU_MAPLE_LEVELS; level++) {
		__u64 node, slots;
		__u32 type, npiv, i;

		/* the root is marked internal ((entry & 3) == 2); every entry of a node that is not a leaf
		 * is a node: type in bits 3-6, the node's address above bit 8 */
		if (level == 0 && ((entry & 3) != 2 || entry <= 4096))
			return -1;
		if (entry <= 4096)
			return -1;
		node = entry & ~0xffULL;
		type = (entry >> 3) & 0xf;
		if (type == 3) {            /* maple_arange_64 */
			npiv = 9;
			slots = node + nu_off_arange_slot;
		} else if (type <= 2) {     /* maple_leaf_64, maple_range_64 */
			npiv = NU_MAPLE_PIVOTS;
			slots = node + nu_off_range_slot;
		} else {
			return -1;
		}
		if (bpf_probe_read_kernel(piv, sizeof(piv), (void *)(node + nu_off_range_pivot)))
			return -1;
		/* slot i holds (pivot[i-1], pivot[i]]; a zero pivot after the first ends the node */
		for (i = 0; i < NU_MAPLE_PIVOTS; i++) {
			if (i >= npiv || (i > 0 && piv[i] == 0) || pc <= piv[i])
				break;
		}
		entry = nu_kread(slots, i * 8);
		if (type < 2) {
			vma = entry;
			if (!vma || (vma & 3))
				return -1;
			out->start = nu_kread(vma, nu_off_vma_start);
			out->end = nu_kread(vma, nu_off_vma_end);
			if (pc < out->start || pc >= out->end || nu_kread(vma, nu_off_vma_mm) != mm)
				return -1;
			if (!(nu_kread(vma, nu_off_vma_flags) & NU_VM_EXEC))
				return -1;
			out->to_offset = (__s64)(nu_kread(vma, nu_off_vma_pgoff) << NU_PAGE_SHIFT) - (__s64)out->start;
			nu_vma_file(vma, out);
			if (!out->ino && nu_off_mm_vdso && out->start == nu_kread(mm, nu_off_mm_vdso)) {
				out->ino = NU_VDSO_INO;
				out->dev = NU_VDSO_DEV;
			}
			return 0;
		}
	}
	return -1;
}

/* The userspace layout: the last range starting at or below pc, if pc is inside it. */
static __always_inline int nu_search_ranges(struct nu_ranges *pr, __u64 pc, struct nu_range *out)
{
	__u32 lo = 0, hi = pr->count, i;
	struct nu_range *r;

	if (hi > NU_CACHE_SLOTS)
		hi = NU_CACHE_SLOTS;
	for (i = 0; i < 7; i++) {        /* log2(NU_CACHE_SLOTS) + 1 */
		__u32 mid;

		if (lo >= hi)
			break;
		mid = (lo + hi) / 2;
		if (pr->r[mid & (NU_CACHE_SLOTS - 1)].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	r = &pr->r[(lo - 1) & (NU_CACHE_SLOTS - 1)];
	if (pc >= r->end)
		return -1;
	*out = *r;
	return 0;
}

/*
 * A stamp of mm's address space that moves with any change of its mappings: mm_lock_seq where the
 * kernel has it (6.4+: bumped by every mmap-lock writer). Before it, a mix of the mapping count and
 * the total and executable page counts: a mapping added, removed or resized moves one of them. A
 * library swapped for another of the same page counts at the same address is the change they
 * miss (a slot would keep the first file's name and rules for the second's code): the walk mixes
 * in the count of executable file mappings the process made (nu_ranges.mapped, mappings.bpf.c),
 * where that program could be attached.
 */
static __always_inline __u32 nu_mm_stamp(__u64 mm)
{
	__u32 seq = 0;

	if (nu_off_mm_seq) {
		bpf_probe_read_kernel(&seq, sizeof(seq), (void *)(mm + nu_off_mm_seq));
		return seq;
	}
	if (!nu_off_mm_map_count)
		return 0;
	seq = (__u32)nu_kread(mm, nu_off_mm_map_count);
	seq = seq * 0x9e3779b1U ^ (__u32)nu_kread(mm, nu_off_mm_total_vm);
	return seq * 0x9e3779b1U ^ (__u32)nu_kread(mm, nu_off_mm_exec_vm);
}

/* Whether `slot` had a mapping over out's addresses, another file or offset now: the process
 * unloaded a library and loaded another there. Its addresses mean other code from now on. */
static __always_inline int nu_replaced(const struct nu_range *slot, const struct nu_range *out)
{
	return slot->start < out->end && out->start < slot->end &&
	       (slot->ino != out->ino || slot->dev != out->dev || slot->to_offset != out->to_offset);
}

/* The executable mapping holding pc, from the process's cache or the VMA tree.
 * Two slots a pc may be cached in: its own, (pc >> NU_CACHE_SHIFT) % NU_CACHE_SLOTS, and that one's
 * other half (slot ^ NU_CACHE_SLOTS / 2). A mapping read from the tree goes in its own slot, unless
 * that holds another current mapping and the other slot does not. Two mappings whose code falls in
 * one slot (a program's _start and libc's __libc_start_call_main, ~1 process in 64) would otherwise
 * push each other out at every walk. The cache a process leaves at its exit would then lack one,
 * and it names the stacks of a process gone before userspace read its maps (exited_mappings,
 * unwind/process_mappings.py).
 * `two_way` (a constant): the step program with the runtime hooks uses its own slot only. Its BPF
 * stack (512 bytes for itself and hs_step) has no room for the second slot's pointers; where it runs
 * (a host with a JVM or Node.js), a noted process whose mapping was pushed out has its image read
 * again (sampling/engine.py). */
static __always_inline int nu_lookup_range(struct nu_ranges *pr, struct nu_state *st, __u64 pc, struct nu_range *out,
					   int two_way)
{
	struct nu_range *slot = &pr->r[(pc >> NU_CACHE_SHIFT) & (NU_CACHE_SLOTS - 1)];
	struct nu_range *other = &pr->r[((pc >> NU_CACHE_SHIFT) & (NU_CACHE_SLOTS - 1)) ^ (NU_CACHE_SLOTS / 2)];

	if (!nu_kernel_vma_walk)
		return nu_search_ranges(pr, pc, out);
	if (slot->start <= pc && pc < slot->end && slot->seq == st->seq) {
		*out = *slot;
		return 0;
	}
	if (two_way && other->start <= pc && pc < other->end && other->seq == st->seq) {
		*out = *other;
		return 0;
	}
	if (!pr->mm)
		return -1;
	nu_count(NU_STAT_VMA_WALKS);
	if (nu_maple_find(st->mm, pc, out)) {
		nu_count(NU_STAT_VMA_WALK_MISSES);
		return -1;
	}
	out->seq = st->seq;
	/* where a slot had a mapping over these addresses, another file or offset now: the process
	 * unloaded a library and loaded another there. Its addresses mean other code from now on. */
	if (nu_replaced(slot, out) || (two_way && nu_replaced(other, out))) {
		struct nu_range *stale = two_way && !nu_replaced(slot, out) ? other : slot;
		struct nu_remap_value changed = {
			.start = stale->start < out->start ? stale->start : out->start,
			.end = stale->end > out->end ? stale->end : out->end,
		};

		nu_count(NU_STAT_REMAPPED);
		if (bpf_map_update_elem(&nu_remap, &st->tgid, &changed, BPF_NOEXIST) == 0)
			NU_WAKE_USERSPACE();
	}
	if (two_way && slot->end > slot->start && slot->seq == st->seq &&
	    (slot->end <= out->start || out->end <= slot->start) && (other->end <= other->start || other->seq != st->seq))
		slot = other;
	*slot = *out;
	return 0;
}

#endif
