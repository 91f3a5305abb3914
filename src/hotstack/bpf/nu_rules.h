/* SPDX-License-Identifier: GPL-2.0 */
/*
 * File offset -> unwind rule, for the native unwinder (included by native_unwind.h). The tables,
 * filled by userspace (unwind/kernel_maps.py; their records in schema.yaml):
 *   nu_rows   ARRAY of u64, one arena for every file: a row is (file offset << 32 | rule id),
 *             each file's rows sorted and contiguous, so a binary search is one u64 compare per
 *             step. Rows are keyed by file offset, not address: a PC's file offset comes from its
 *             VMA (pc - vm_start + vm_pgoff * PAGE_SIZE), so one file's table serves every process
 *             that maps it, at any address. Before a file's rows, in the same arena, its page
 *             index: one word per NU_INDEX_SHIFT-sized page of file offsets (first row of the page
 *             | first row of the next page << 32). A search reads one index word and then ~30 rows
 *             of one page (~4 cache lines), not 17 steps spread over the whole table (python3's has
 *             64k rows). Each cache line missed after the sampled code ran costs ~0.25 us on the
 *             machines measured: the page index, nu_rule_cache and the walk's last file
 *             (nu_state.file) keep those few.
 *   nu_rules  ARRAY of struct nu_rule: the deduplicated rules of every file (a few thousand).
 *   nu_files  HASH struct nu_file_key (inode, dev) -> struct nu_file (where its rows are).
 */
#ifndef HOTSTACK_NU_RULES_H
#define HOTSTACK_NU_RULES_H

#include "nu_maps.h"
#include "nu_mappings.h"

#define NU_PAGE_SEARCH_STEPS 11     /* log2(rows in a page) + 1: at most one row per byte offset */

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

#endif
