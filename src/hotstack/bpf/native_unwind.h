/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Native user-stack unwinding in the kernel, with .eh_frame-derived tables in BPF maps.
 *
 * Tables (filled by userspace, unwind/kernel_maps.py; their records in schema.yaml):
 *   nu_rows   ARRAY of u64, one arena for every file: a row is (file offset << 32 | rule id),
 *             each file's rows sorted and contiguous, so a binary search is one u64 compare
 *             per step. Rows are keyed by file offset, not address: a PC's file offset comes
 *             from its VMA (pc - vm_start + vm_pgoff * PAGE_SIZE), so one file's table serves
 *             every process that maps it, at any address. Before a file's rows, in the same
 *             arena, its page index: one word per NU_INDEX_SHIFT-sized page of file offsets,
 *             (first row of the page | first row of the next page << 32), so a search reads one
 *             index word and then ~30 rows of one page (~4 cache lines), not 17 steps spread over
 *             the whole table (python3's has 64k rows). Each cache line missed after the sampled
 *             code ran costs ~0.25 us on the machines measured: this, nu_rule_cache and the walk's
 *             last file (nu_state.file) took the steps' time a frame down by ~40% (bench/RESULTS.md,
 *             session 13).
 *   nu_rules  ARRAY of struct nu_rule: the deduplicated rules of every file (a few thousand).
 *   nu_files  HASH (inode, dev) -> struct nu_file {first row, row count, index, last use}.
 *
 * PC -> file: nu_procs, an LRU hash tgid -> struct nu_ranges, a per-process cache of the
 * executable mappings met so far. On a miss the program walks the process's VMA tree itself
 * (mm->mm_mt, the maple tree of kernels 6.1+, read with bpf_probe_read_kernel; offsets from the
 * kernel's BTF, chosen at load time: `nu_kernel_vma_walk`), so a process is unwound from its
 * first sample with no per-process work in userspace. Neither helper made for this works from
 * the perf-event interrupt: bpf_find_vma (5.17+) releases the mmap lock through a per-CPU
 * irq_work that stays busy until the interrupt returns, so only one call per sample succeeds,
 * and the task-VMA iterator kfuncs refuse any context with interrupts off (EBUSY). Where the
 * tree cannot be walked (older kernels) userspace fills the same cache from /proc/PID/maps
 * (mm = 0: kept as written).
 *
 * A PC in a file without a table is counted, its file queued in nu_missing for userspace to
 * build, and the rest of the stack is walked with frame pointers (counted): the next samples
 * are complete. Code that is in no file (JIT) is walked with frame pointers, counted.
 *
 * The walk: per-CPU state (struct nu_state), NU_FRAMES_PER_PROG frames per program, then a
 * tail call to the same program (nu_progs slot 0) until NU_MAX_FRAMES frames, the root
 * (a STOP row: _start, clone3, thread start), or an error. The includer defines the
 * program that runs the steps (NU_STEP_PROGRAM) and what happens at the end (nu_done()).
 */
#ifndef HOTSTACK_NATIVE_UNWIND_H
#define HOTSTACK_NATIVE_UNWIND_H

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "arch.h"
#include "schema.h"
#include "nu_procs.h"

/* How a queued request (a file without a table, a stale mapping list) wakes userspace: the
 * includer's pids.h defines it; a harness without one polls. */
#ifndef NU_WAKE_USERSPACE
#define NU_WAKE_USERSPACE() do { } while (0)
#endif

/*
 * The runtime hook: a language runtime's recorder (bpf/v8.h) learns of every frame walked with
 * frame pointers (JIT code, code without tables: where a runtime's generated code is), with its pc,
 * its frame pointer and its position in the stack, before the step. The includer defines it
 * before including this file; by default it does nothing.
 */
#ifndef NU_RUNTIME_FRAME
#define NU_RUNTIME_FRAME(pc, fp, index) do { } while (0)
#endif

/*
 * The runtime step hook: a runtime whose generated code cannot be walked with frame pointers
 * (bpf/hotspot.h) steps a PC in anonymous executable memory itself: 1 if the PC is not its code
 * (frame pointers, as without the hook), 0 when it stepped st to the caller, -1 at the end.
 */
#ifndef NU_RUNTIME_JIT_STEP
#define NU_RUNTIME_JIT_STEP(st, pc, index) 1
#endif

/* Frames a walk records at most: NU_MAX_FRAMES (schema.yaml); past them the stack ends as
 * NU_END_TRUNCATED (userspace shows a [truncated] frame). The first NU_STORED_FRAMES are stored with
 * the stack's header in native_stacks, the rest of a deeper stack in native_tails (few stacks are:
 * the common map's values stay 1 KiB). */

/* Frames per step program: NU_MAX_FRAMES within the kernel's tail calls (32 on 5.10, 33 later),
 * with an interpreter walker in front: 31 programs of 34 frames. The verifier checks every step of
 * the program's loop at every load: 34 steps are ~280k instructions (~0.5 CPU-s) without the
 * runtime hooks, ~300k with them (global functions, checked once). A bpf_loop of one step was
 * more (410k and 460k on 6.18, whose verifier follows a callback until its states converge). */
#define NU_FRAMES_PER_PROG 34
/* ... where the program walks the VMA tree (6.1+). Where userspace keeps the mapping lists (5.10 to
 * 6.0) each step's binary search of the list makes it ~6 times the verifier's work: 34 steps were
 * past its 1M instructions, so 5 a program, and a walk there is cut (marked truncated) past 155
 * frames (31 programs). */
#define NU_LIST_FRAMES_PER_PROG 5
#define NU_PAGE_SEARCH_STEPS 11     /* log2(rows in a page) + 1: at most one row per byte offset */
#define NU_PAGE_SHIFT 12

/* A looked-up rule, in a per-CPU direct-mapped cache keyed by (table serial, file offset): the
 * stacks a CPU walks repeat the same return addresses, and one cache line then replaces the search's
 * ~6 (the index word, the page's rows, the rule), each a miss after the sampled code ran. A serial
 * names one load of one file's table, so an entry never outlives its table. The cache is an ARRAY
 * of NU_RULE_CACHE_SLOTS entries per CPU (CPU c's at c * NU_RULE_CACHE_SLOTS; userspace sizes it
 * for the possible CPUs, kernel_maps.configure): an entry is one inlined lookup, no per-CPU pointer
 * to follow, and a fixed-offset pointer (an index into one large per-CPU value was a variable
 * offset the verifier could not prune on: twice its work on the step program). A CPU past the
 * sized ones finds no slot and searches every time. */
struct nu_cached_rule {
	__u32 serial;
	__u32 offset;
	struct nu_rule rule;
};


#ifndef barrier
#define barrier() asm volatile("" ::: "memory")
#endif

struct nu_state {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u64 lr;          /* arm64: the link register, known at the first frame and after a signal frame only */
	__u64 mm;
	__u32 tgid;
	__u32 signal;      /* the current pc was interrupted (a signal frame): look it up as is */
	__u64 xhash;       /* the hash of the frames by (file, file offset) so far (struct nu_stack) */
	__u64 chash;       /* the same, of the frames after the leaf (struct nu_stack.callers) */
	__u64 ahash;       /* the hash of the frames' addresses so far (a stack keyed by address) */
	__u32 tail_id;     /* a deep stack's id, the key of its native_tails entry (native_count.h) */
	__u32 tail_pad;
	__u32 shared;      /* 1 while every frame is in a file: the stack is keyed by xhash */
	__u32 seq;         /* the address space's stamp at the walk's start (nu_mm_stamp) */
	/* A leaf pc in [leaf_start, leaf_end) is recorded as leaf_start (an interpreter's walker sets
	 * them: a leaf in its evaluation loop is replaced by the interpreter's frames, so the exact
	 * instruction tells nothing, and had made a stack per instruction of the loop); the walk
	 * itself unwinds from the pc as it is. 0, 0: none. */
	__u64 leaf_start;
	__u64 leaf_end;
	/* the file of the last frame looked up in this walk and its nu_files entry: most frames of a
	 * stack are in the file of the frame before (one program's, or libc's), where each had cost a
	 * hash lookup (bench/RESULTS.md, session 13) */
	struct nu_file_key file_key;
	struct nu_file file;
	/* a step's scratch, here and not on the BPF stack: the step program with the runtime hooks
	 * (a call of hs_step) has 512 bytes for both frames */
	struct nu_range range;           /* the mapping of the frame's pc */
	struct nu_missing_value missing; /* a file queued for a table */
	__u64 pair[2];                   /* the caller's frame pointer and return address, as read */
	struct nu_rule rule;             /* the frame's rule, copied out of the cache (and checked
	                                  * again after the copy) or out of the rules */
	struct nu_stack stack;
	__u64 ctx_words[12]; /* the includer's per-sample data (its key, comm, buffer...) */
};

/* Kernel structure offsets (from the kernel's BTF, written by userspace before loading). */
const volatile __u32 nu_kernel_vma_walk = 0;   /* 1: walk the maple tree on a cache miss */
const volatile __u32 nu_off_mm_root = 0;        /* mm_struct.mm_mt.ma_root */
const volatile __u32 nu_off_mm_seq = 0;         /* mm_struct.mm_lock_seq (0: none, below 6.4) */
const volatile __u32 nu_off_mm_map_count = 0;   /* mm_struct.map_count, total_vm, exec_vm: where */
const volatile __u32 nu_off_mm_total_vm = 0;    /* there is no mm_lock_seq, the stamp is made of */
const volatile __u32 nu_off_mm_exec_vm = 0;     /* them */
const volatile __u32 nu_off_range_pivot = 8;    /* maple_range_64.pivot (maple_arange_64's too) */
const volatile __u32 nu_off_range_slot = 128;
const volatile __u32 nu_off_arange_slot = 80;
const volatile __u32 nu_off_vma_start = 0;
const volatile __u32 nu_off_vma_end = 8;
const volatile __u32 nu_off_vma_pgoff = 0;
const volatile __u32 nu_off_file_inode = 0;
const volatile __u32 nu_off_inode_ino = 0;
const volatile __u32 nu_off_inode_sb = 0;
const volatile __u32 nu_off_sb_dev = 0;
const volatile __u32 nu_off_task_mm = 0;
const volatile __u32 nu_off_task_stack = 0;      /* task_struct.stack (0: unknown) */
const volatile __u32 nu_thread_size = 16384;    /* THREAD_SIZE without KASAN (x86-64, arm64 with 4K pages) */
const volatile __u32 nu_off_mm_vdso = 0;        /* mm_struct.context.vdso (0: unknown) */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 20);   /* resized by userspace before loading */
	__type(key, __u32);
	__type(value, __u64);
} nu_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct nu_rule);
} nu_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nu_file_key);
	__type(value, struct nu_file);
} nu_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct nu_file_key);
	__type(value, struct nu_missing_value);
} nu_missing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct nu_remap_value);
} nu_remap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nu_state);
} nu_state_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nu_ranges);
} nu_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NU_RULE_CACHE_SLOTS);    /* resized by userspace: one CPU's slots per CPU */
	__type(key, __u32);
	__type(value, struct nu_cached_rule);
} nu_rule_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NU_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} nu_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nu_progs SEC(".maps");

static __always_inline void nu_count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&nu_stats, &index);

	if (value)
		*value += 1;
}

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
 * that holds another current mapping and the other slot does not: two mappings whose code falls in
 * one slot (a program's _start and libc's __libc_start_call_main, ~1 process in 64) had pushed each
 * other out at every walk, so the cache a process leaves at its exit (what names the stacks of a
 * process gone before userspace read its maps: unwind/kernel_maps.py exited_mappings) lacked one.
 * `two_way` (a constant): the step program with the runtime hooks uses its own slot only, as before:
 * its BPF stack (512 bytes for itself and hs_step) has no room for the second slot's pointers; where
 * it runs (a host with a JVM or Node.js), a noted process whose mapping was pushed out has its image
 * read again (sampling/engine.py). */
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

/* The nu_files entry of range's file, from the walk's last one or the map (its last use stamped),
 * copied into st->file; 0 when the file has no table (counted, queued). */
static __always_inline struct nu_file *nu_file_of(struct nu_state *st, struct nu_range *range)
{
	struct nu_file *file;
	__u64 now;

	if (st->file_key.ino == range->ino && st->file_key.dev == range->dev)
		return &st->file;
	st->file_key.ino = range->ino;
	st->file_key.dev = range->dev;
	st->file_key.pad = 0;
	file = bpf_map_lookup_elem(&nu_files, &st->file_key);
	if (!file) {
		long queued;

		st->missing.pid = st->tgid;
		st->missing.pad = 0;
		st->missing.start = range->start;
		st->missing.end = range->end;
		nu_count(NU_STAT_NO_TABLE);
		queued = bpf_map_update_elem(&nu_missing, &st->file_key, &st->missing, BPF_NOEXIST);

		if (queued == 0)
			NU_WAKE_USERSPACE();
		else if (queued == -7 /* E2BIG: full */)
			nu_count(NU_STAT_QUEUE_FULL);
		st->file_key.ino = 0;     /* (not remembered: its next frame asks again) */
		return 0;
	}
	now = bpf_ktime_get_ns();
	if (now - file->last_use > 1000000000ULL)
		file->last_use = now;
	st->file = *file;
	return &st->file;
}

/* The slot of (file, offset) in this CPU's rule cache. */
static __always_inline struct nu_cached_rule *nu_cache_slot(struct nu_file *file, __u64 offset)
{
	__u32 slot = bpf_get_smp_processor_id() * NU_RULE_CACHE_SLOTS
		     + ((__u32)offset ^ (file->serial * 0x9e3779b1U)) % NU_RULE_CACHE_SLOTS;

	return bpf_map_lookup_elem(&nu_rule_cache, &slot);
}

/* The rule for a file offset, or 0 when the file has no table (counted, queued). */
static __always_inline struct nu_rule *nu_find_rule(struct nu_state *st, struct nu_range *range, __u64 pc)
{
	struct nu_file *file = nu_file_of(st, range);
	struct nu_cached_rule *cached;
	struct nu_rule *rule;
	__u64 offset, target;
	__u32 lo, hi, i, id, page;
	__u64 *row;

	if (!file)
		return 0;
	offset = pc + range->to_offset;
	if (offset >> 32)
		return 0;
	cached = nu_cache_slot(file, offset);
	if (cached && cached->serial == file->serial && cached->offset == (__u32)offset) {
		st->rule = cached->rule;
		/* checked again after the copy: a program preempted on this CPU (a uprobe's, on a
		 * preemptible kernel) may have been rewriting the entry, which it marks first */
		barrier();
		if (cached->serial == file->serial && cached->offset == (__u32)offset)
			return &st->rule;
	}
	target = (offset << 32) | 0xFFFFFFFFULL;
	/* the rows of offset's page: [lo, hi) from its index word; past the last page, none (the
	 * answer is the last row) */
	page = (__u32)(offset >> NU_INDEX_SHIFT);
	if (page < file->base)
		return 0;            /* before the file's first row */
	page -= file->base;
	if (page < file->pages) {
		id = file->index + page;
		row = bpf_map_lookup_elem(&nu_rows, &id);
		if (!row)
			return 0;
		lo = file->first + (__u32)*row;
		hi = file->first + (__u32)(*row >> 32);
	} else {
		lo = hi = file->first + file->count;
	}
	for (i = 0; i < NU_PAGE_SEARCH_STEPS; i++) {
		__u32 mid;

		if (lo >= hi)
			break;
		mid = lo + (hi - lo) / 2;
		row = bpf_map_lookup_elem(&nu_rows, &mid);
		if (!row)
			return 0;
		if (*row <= target)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* the last row at or below the offset: in the page, or the one before it (it covers the
	 * page's start) */
	if (lo <= file->first)
		return 0;            /* before the file's first row */
	lo -= 1;
	row = bpf_map_lookup_elem(&nu_rows, &lo);
	if (!row)
		return 0;
	id = (__u32)*row;
	rule = bpf_map_lookup_elem(&nu_rules, &id);
	if (!rule)
		return 0;
	st->rule = *rule;
	/* the slot found again: the pointer kept live across the search made the verifier's work on
	 * the step program 52k instructions, against 39k */
	cached = nu_cache_slot(file, offset);
	if (cached) {
		cached->serial = 0;          /* no reader takes the entry while it is half written */
		barrier();
		cached->offset = (__u32)offset;
		cached->rule = *rule;
		barrier();
		cached->serial = file->serial;
	}
	return &st->rule;
}

static __always_inline int nu_read(__u64 *out, __u64 addr)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

/*
 * One frame-pointer step: the caller's frame is at [bp]: saved bp, return address. `same_stack`:
 * the frame must lie just above sp (a sanity check for code without tables); Go's frames may be on
 * another stack (asmcgocall runs C on the g0 stack and keeps the goroutine's frame pointer in BP).
 */
static __always_inline int nu_fp_walk(struct nu_state *st, int same_stack)
{
	__u64 bp = st->bp, next_bp, ra;

	/* bp == sp: a frame with no locals (push rbp; mov rbp, rsp; call) seen from its callee */
	if (!bp || (bp & 7) || (same_stack && (bp < st->sp || bp - st->sp > (8 << 20)))) {
		st->stack.end = NU_END_BAD_FP;
		return -1;
	}
	if (nu_read(&next_bp, bp) || nu_read(&ra, bp + 8)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	ra = ARCH_STRIP_RA(ra);
	st->sp = bp + 16;
	st->bp = next_bp;
	st->pc = ra;
	st->lr = 0;
	st->signal = 0;
	if (!ra) {
		st->stack.end = NU_END_ZERO;
		return -1;
	}
	return 0;
}

static __always_inline int nu_fp_step(struct nu_state *st)
{
	return nu_fp_walk(st, 1);
}

/* A frame of code without a usable table: counted, shown to the runtime hook (in a step program
 * built with the hooks: `runtimes`), walked with frame pointers. */
static __always_inline int nu_fp_frame(struct nu_state *st, __u64 pc, __u32 index, int runtimes)
{
	nu_count(NU_STAT_FP_FRAMES);
	if (runtimes)
		NU_RUNTIME_FRAME(pc, st->bp, index);
	return nu_fp_step(st);
}

#if defined(__TARGET_ARCH_arm64)
/* arm64: the kernel's rt_sigframe at SP in the sigreturn trampoline: siginfo (128), then the
 * ucontext, whose uc_mcontext (16-aligned, at +176) holds fault_address, regs[31], sp, pc. */
#define NU_SIGCONTEXT (128 + 176)
#define NU_SIG_FP (NU_SIGCONTEXT + 8 + 29 * 8)
#define NU_SIG_LR (NU_SIGCONTEXT + 8 + 30 * 8)
#define NU_SIG_SP (NU_SIGCONTEXT + 8 + 31 * 8)
#define NU_SIG_PC (NU_SIGCONTEXT + 8 + 32 * 8)
#else
/* x86-64: the kernel's rt_sigframe at RSP after the handler returned into __restore_rt:
 * ucontext at +0 (pretcode popped), uc_mcontext at +40; rbp, rsp, rip at +80, +120, +128 of it. */
#define NU_SIG_FP (40 + 80)
#define NU_SIG_SP (40 + 120)
#define NU_SIG_PC (40 + 128)
#endif
static __always_inline int nu_signal_step(struct nu_state *st)
{
	__u64 base = st->sp, bp, sp, pc, lr = 0;

	if (nu_read(&bp, base + NU_SIG_FP) || nu_read(&sp, base + NU_SIG_SP) || nu_read(&pc, base + NU_SIG_PC)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
#ifdef NU_SIG_LR
	if (nu_read(&lr, base + NU_SIG_LR)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
#endif
	st->lr = lr;
	st->bp = bp;
	st->sp = sp;
	st->pc = pc;
	st->signal = 1;
	nu_count(NU_STAT_SIGNAL);
	return 0;
}

/* One word more into a running FNV-style hash. */
static __always_inline __u64 nu_mix(__u64 h, __u64 word)
{
	h ^= word;
	h *= NU_HASH_PRIME;
	return h ^ (h >> NU_HASH_SHIFT);
}

/* The leaf's file and file offset (the first frame), and the callers' hash (struct nu_stack.callers)
 * of the frames after it. Without a branch on n: one had cost the verifier ~40% more instructions in
 * each step program (every unrolled step checked both ways); `keep` is all ones from the second
 * frame on, made by arithmetic the compiler cannot turn back into a compare. */
static __always_inline void nu_leaf_and_callers(struct nu_state *st, const struct nu_range *range, __u64 off, __u32 n)
{
	__u64 later = ((__u64)n + 0xffffffffULL) >> 32;     /* 0 at the leaf, 1 after (n < 2^32) */
	__u64 keep;

	asm volatile("" : "+r"(later));
	keep = -later;
	st->chash = (nu_mix(nu_mix(nu_mix(st->chash, range->ino), range->dev), off) & keep) | (st->chash & ~keep);
	st->stack.leaf_offset = (st->stack.leaf_offset & keep) | (off & ~keep);
	st->stack.leaf_ino = (st->stack.leaf_ino & keep) | (range->ino & ~keep);
	st->stack.leaf_dev = (__u32)(((__u64)st->stack.leaf_dev & keep) | ((__u64)range->dev & ~keep));
}

/* Record st->pc and step to its caller. Returns 0 to go on, -1 at the end (st->stack.end says why).
 * `runtimes` (a constant of each step program) says whether the runtime hooks are called. */
static __always_inline int nu_step(struct nu_state *st, struct nu_ranges *pr, int runtimes)
{
	__u64 pc = st->pc, shown, lookup, cfa, ra;
	struct nu_range *range = &st->range;
	struct nu_rule *rule;
	__u32 n = st->stack.n;

	if (n >= NU_MAX_FRAMES) {
		st->stack.end = NU_END_TRUNCATED;
		return -1;
	}
	/* a return address points after the call: look up the call itself */
	lookup = (n == 0 || st->signal) ? pc : pc - 1;
	/* recorded and hashed so; the frame is unwound from its pc */
	shown = (n == 0 && pc - st->leaf_start < st->leaf_end - st->leaf_start) ? st->leaf_start : pc;
	st->stack.pcs[n] = shown;
	st->stack.n = n + 1;
	/* (hashed as it goes: a loop over up to NU_MAX_FRAMES addresses at the end had been most of
	 * the verifier's work on each step program) */
	st->ahash = nu_mix(st->ahash, shown);
	if (!st->mm) {
		/* task->mm is cleared in do_exit before the address space is torn down (exit_mmap:
		 * ~2% of an `xz -9` loop's samples); no user read can succeed from here on */
		st->stack.end = NU_END_EXITED;
		st->shared = 0;
		return -1;
	}
	if (!pr || nu_lookup_range(pr, st, lookup, range, !runtimes)) {
		st->stack.end = NU_END_NO_MAPPING;
		st->shared = 0;
		if (!nu_kernel_vma_walk) {
			struct nu_remap_value anywhere = {};

			if (bpf_map_update_elem(&nu_remap, &st->tgid, &anywhere, BPF_NOEXIST) == 0)
				NU_WAKE_USERSPACE();
		}
		return -1;
	}
	if (!range->ino) {
		int stepped;

		st->shared = 0;
		nu_count(NU_STAT_JIT);
		stepped = runtimes ? NU_RUNTIME_JIT_STEP(st, pc, n) : 1;
		if (stepped != 1)
			return stepped;
		return nu_fp_frame(st, pc, n, runtimes);
	}
	if (range->dev == NU_VDSO_DEV)
		st->shared = 0;
	st->xhash = nu_mix(nu_mix(nu_mix(st->xhash, range->ino), range->dev), shown + range->to_offset);
	nu_leaf_and_callers(st, range, shown + range->to_offset, n);
	rule = nu_find_rule(st, range, lookup);
	if (!rule)
		return nu_fp_frame(st, pc, n, runtimes);
	switch (rule->kind) {
	case NU_KIND_CFA_SP:
		cfa = st->sp + rule->cfa;
		break;
	case NU_KIND_CFA_FP:
		cfa = st->bp + rule->cfa;
		break;
	case NU_KIND_PLT:
		cfa = st->sp + rule->cfa + ((pc & 15) >= (__u64)rule->rbp ? 8 : 0);
		break;
	case NU_KIND_FP_GO:
		nu_count(NU_STAT_GO_FRAMES);
		return nu_fp_walk(st, 0);
	case NU_KIND_STOP:
		st->stack.end = NU_END_ROOT;
		return -1;
	case NU_KIND_SIGNAL:
		return nu_signal_step(st);
	default:
		nu_count(NU_STAT_INVALID_RULE);
		return nu_fp_frame(st, pc, n, runtimes);
	}
#if defined(__TARGET_ARCH_arm64)
	/* before the prologue saved it (or in a leaf that never does) the return address is in the
	 * link register, which only the first frame (or a signal frame) still has */
	if (rule->ra == NU_RA_SAME && (!(n == 0 || st->signal) || !st->lr)) {
		nu_count(NU_STAT_INVALID_RULE);
		return nu_fp_frame(st, pc, n, runtimes);
	}
#endif
	/* From here on the frame is stepped (or the walk ends): the caller's registers are read
	 * straight into st, so that few values stay live across the reads (the step program with the
	 * runtime hooks has 512 bytes of BPF stack for itself and hs_step) */
	st->sp = cfa;
	st->pair[0] = st->bp;
#if defined(__TARGET_ARCH_arm64)
	if (rule->ra == NU_RA_SAME)
		st->pair[1] = st->lr;
	else
#endif
	if (nu_read(&st->pair[1], cfa + rule->ra)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	if (rule->kind != NU_KIND_PLT && rule->rbp != NU_RBP_SAME && nu_read(&st->pair[0], st->sp + rule->rbp)) {
		st->stack.end = NU_END_READ;
		return -1;
	}
	ra = ARCH_STRIP_RA(st->pair[1]);
	nu_count(NU_STAT_FRAMES);
	st->pc = ra;
	st->bp = st->pair[0];
	st->lr = 0;
	st->signal = 0;
	if (!ra) {
		st->stack.end = NU_END_ZERO;
		return -1;
	}
	return 0;
}

static __always_inline struct nu_state *nu_state(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nu_state_map, &zero);
}

/*
 * Start a walk for the current task from its user registers. Finds (or builds, in the kernel)
 * the process's mapping list. Returns the per-CPU state, or 0 if there is nothing to walk.
 */
static __always_inline struct nu_state *nu_begin(__u32 tgid, const struct arch_regs *regs)
{
	struct nu_state *st = nu_state();
	struct nu_ranges *pr, *fresh;
	__u32 zero = 0;
	__u64 mm;

	if (!st)
		return 0;
	st->pc = regs->ip;
	st->sp = regs->sp;
	st->bp = regs->fp;
	st->lr = regs->lr;
	st->tgid = tgid;
	st->stack.n = 0;
	st->stack.end = NU_END_NONE;
	st->signal = 0;
	st->xhash = NU_HASH_BASIS;
	st->chash = NU_HASH_BASIS;
	st->ahash = NU_HASH_BASIS;
	st->shared = 1;
	st->leaf_start = 0;
	st->leaf_end = 0;
	st->file_key.ino = 0;     /* no file looked up yet (0: anonymous memory, never looked up) */
	nu_count(NU_STAT_WALKS);
	mm = nu_current_mm();
	st->mm = mm;
	/* no address space (past exit_mm: the walk ends as exited at its first step): the cache is
	 * left as it is, for userspace to name the samples the process left (exited_mappings) */
	if (!nu_kernel_vma_walk || !mm)
		return st;
	st->seq = nu_mm_stamp(mm);
	pr = bpf_map_lookup_elem(&nu_procs, &tgid);
	if (pr && pr->mm == mm) {
		/* before mm_lock_seq (6.4), the executable file mappings made since the cache was made
		 * (mappings.bpf.c): a library swapped for another of the same page counts leaves the
		 * stamp's counts as they were */
		if (!nu_off_mm_seq)
			st->seq ^= pr->mapped * 0x85ebca6bU;
		return st;
	}
	/* a new process or an exec (a new mm): an empty cache */
	fresh = bpf_map_lookup_elem(&nu_scratch, &zero);   /* never written but for this field */
	if (!fresh)
		return st;
	fresh->mm = mm;
	bpf_map_update_elem(&nu_procs, &tgid, fresh, BPF_ANY);
	return st;
}

/* Up to NU_FRAMES_PER_PROG steps; 1 if the walk is over. `runtimes`: call the runtime hooks (a
 * constant: each step program is built with or without them). */
static __always_inline int nu_steps(struct nu_state *st, int runtimes)
{
	struct nu_ranges *pr = bpf_map_lookup_elem(&nu_procs, &st->tgid);
	int i;

	if (!pr && st->stack.n == 0)
		nu_count(NU_STAT_NO_RANGES);
	/* (the bound is known at load: nu_kernel_vma_walk is read-only) */
	for (i = 0; i < (nu_kernel_vma_walk ? NU_FRAMES_PER_PROG : NU_LIST_FRAMES_PER_PROG); i++) {
		if (nu_step(st, pr, runtimes))
			return 1;
	}
	return st->stack.n >= NU_MAX_FRAMES;
}

static __always_inline void nu_count_end(struct nu_state *st)
{
	switch (st->stack.end) {
	case NU_END_ROOT: nu_count(NU_STAT_END_ROOT); break;
	case NU_END_ZERO: nu_count(NU_STAT_END_ZERO); break;
	case NU_END_NONE:
	case NU_END_TRUNCATED: st->stack.end = NU_END_TRUNCATED; nu_count(NU_STAT_END_TRUNCATED); break;
	case NU_END_NO_MAPPING: nu_count(NU_STAT_END_NO_MAPPING); break;
	case NU_END_BAD_FP: nu_count(NU_STAT_END_BAD_FP); break;
	case NU_END_READ: nu_count(NU_STAT_END_READ); break;
	case NU_END_EXITED: nu_count(NU_STAT_END_EXITED); break;
	default: nu_count(NU_STAT_END_INVALID); break;
	}
}

/* A 64-bit hash of the walked frames (the stack's key), also stored in st->stack.hash, with the
 * process whose addresses the stack holds: by file and file offset when every frame is in a file
 * (struct nu_stack), else by address and process. */
static __always_inline __u64 nu_hash(struct nu_state *st)
{
	__u64 h;

	st->stack.pid = st->tgid;
	st->stack.by_file = st->shared && st->stack.n;
	st->stack.callers = 0;
	if (st->stack.by_file) {
		h = nu_mix(nu_mix(st->xhash, st->stack.n), st->stack.end);
		st->stack.callers = nu_mix(nu_mix(st->chash, st->stack.n), st->stack.end);
	} else {
		h = nu_mix(nu_mix(st->ahash, st->stack.n), st->tgid);
	}
	h = h ? h : 1;
	st->stack.hash = h;
	return h;
}

#endif
