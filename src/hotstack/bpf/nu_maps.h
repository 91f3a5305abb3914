/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The native unwinder's per-CPU walk state (struct nu_state), the kernel structure offsets it reads
 * with, and its maps. Included by native_unwind.h; the records userspace reads or writes are in
 * schema.yaml.
 */
#ifndef HOTSTACK_NU_MAPS_H
#define HOTSTACK_NU_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "schema.h"
#include "nu_procs.h"

/* A looked-up rule, in a per-CPU direct-mapped cache keyed by (table serial, file offset): the
 * stacks a CPU walks repeat the same return addresses, and one cache line then replaces the search's
 * ~6 (the index word, the page's rows, the rule), each a miss after the sampled code ran. A serial
 * names one load of one file's table, so an entry never outlives its table. The cache is an ARRAY
 * of NU_RULE_CACHE_SLOTS entries per CPU (CPU c's at c * NU_RULE_CACHE_SLOTS; userspace sizes it
 * for the possible CPUs, kernel_config.configure). An entry is one inlined lookup, no per-CPU
 * pointer to follow, and a fixed-offset pointer (an index into one large per-CPU value would be a
 * variable offset the verifier cannot prune on: twice its work on the step program). A CPU past the
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
	 * instruction tells nothing, and would make a stack per instruction of the loop); the walk
	 * itself unwinds from the pc as it is. 0, 0: none. A leaf in [leaf_part_start, leaf_part_end)
	 * (the part of the loop its compiler split out, where no symbol names it) is recorded as
	 * leaf_start too: one leaf for the whole loop, named as the loop. */
	__u64 leaf_start;
	__u64 leaf_end;
	__u64 leaf_part_start;
	__u64 leaf_part_end;
	/* the file of the last frame looked up in this walk and its nu_files entry: most frames of a
	 * stack are in the file of the frame before (one program's, or libc's), which then costs no
	 * hash lookup */
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


#endif
