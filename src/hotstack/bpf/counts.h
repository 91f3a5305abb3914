/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every stack-counting program shares (profile, probe, offcpu): counts per struct stack_key
 * in two buffers, the stacks they point to, the pid filter and the per-CPU `stats` counters.
 *
 * Programs write into the buffer named by `active_buffer`; userspace flips it, waits for programs
 * in flight, then drains the other (sampling/buffers.py), so every count is read exactly once and
 * stack ids of one interval never point into another's. Layouts and names: bpf/schema.yaml.
 */
#ifndef HOTSTACK_COUNTS_H
#define HOTSTACK_COUNTS_H

#include "schema.h"
#include "pids.h"

/* Stack maps are hash tables that refuse a stack whose bucket is taken (a collision), so they
 * lose stacks long before they are full: size them for the distinct stacks an interval sees. */
#ifndef USER_STACK_ENTRIES
#define USER_STACK_ENTRIES 8192
#endif
#ifndef KERN_STACK_ENTRIES
#define KERN_STACK_ENTRIES 8192
#endif

HS_COUNTS_VARIABLES
HS_COUNTS_MAPS     /* and the pid filter, from pids.h */

/* The map of the given buffer: BUFFER_MAP(buffer, counts) is &counts_0 or &counts_1. */
#define BUFFER_MAP(buffer, name) ((buffer) ? (void *)&name##_1 : (void *)&name##_0)

static __always_inline void count_stat(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &index);

	if (value)
		*value += 1; /* per-CPU slot: no atomic needed */
}

/* Count a lost stack (a negative id) as a collision or another error. -EFAULT is no loss: the
 * task has no user stack (a kernel thread). */
static __always_inline void stack_lost(__s32 id, __u32 collision, __u32 other)
{
	if (id < 0 && id != -EFAULT)
		count_stat(id == -EEXIST ? collision : other);
}

/* False if the pid is filtered out (counted as such). */
static __always_inline int pid_wanted(__u32 pid)
{
	if (!pid_allowed(pid)) {
		count_stat(STAT_FILTERED);
		return 0;
	}
	return 1;
}

/* Add `value` to the key's count in `buffer` (first insert carries the comm). */
static __always_inline void count_stack(struct stack_key *key, const char *comm, __u64 value, __u32 buffer)
{
	struct stack_count init = {};
	struct stack_count *entry;
	void *counts = BUFFER_MAP(buffer, counts);

	entry = bpf_map_lookup_elem(counts, key);
	if (entry) {
		__sync_fetch_and_add(&entry->value, value);
		return;
	}
	init.value = value;
	__builtin_memcpy(init.comm, comm, COMM_LEN);
	if (bpf_map_update_elem(counts, key, &init, BPF_NOEXIST) == 0)
		return;
	/* Another CPU inserted the same key first: add to its entry. */
	entry = bpf_map_lookup_elem(counts, key);
	if (entry) {
		__sync_fetch_and_add(&entry->value, value);
		return;
	}
	count_stat(STAT_COUNTS_FULL);
}

#endif
