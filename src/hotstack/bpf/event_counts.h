/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Stacks counted per event, for programs driven by events rather than a clock
 * (probe.bpf.c: probe hits; offcpu.bpf.c: nanoseconds off the CPU).
 *
 * Each event adds `value` to a count keyed by (pid, tid, user stack, kernel stack,
 * caller). Counts and stacks live in two buffers: programs write into the buffer
 * named by `active_buffer`; userspace flips it, waits for in-flight programs, then
 * drains the idle one (sampling/stack_buffers.py mirrors this layout).
 *
 * `caller` is the return address on top of the user stack, read only by uprobes
 * at a function's first instruction: there the frame-pointer walk starts at the
 * caller's frame and would skip the caller itself.
 */
#ifndef HOTSTACK_EVENT_COUNTS_H
#define HOTSTACK_EVENT_COUNTS_H

#include "obi.h"
#include "pids.h"
#include "buffers.h"

#define COMM_LEN 16

struct event_key {
	__u32 pid;
	__u32 tid;
	__s32 user_stack_id;
	__s32 kern_stack_id;
	__u64 caller;
	struct obi_trace_context trace;  /* the thread's OBI span at the event (obi.h); zero: none */
};

struct event_value {
	__u64 value;
	char comm[COMM_LEN];
};

/* Indexes of the per-CPU `stats` counters; mirrored in sampling/stack_buffers.py. */
enum event_stat_index {
	EV_STAT_EVENTS = 0,      /* events seen by the programs */
	EV_STAT_IDLE,            /* dropped: idle task */
	EV_STAT_FILTERED,        /* dropped: pid filter */
	EV_STAT_COUNTS_FULL,     /* dropped: counts map full */
	EV_STAT_USTACK_COLLISION,
	EV_STAT_KSTACK_COLLISION,
	EV_STAT_USTACK_ERROR,
	EV_STAT_KSTACK_ERROR,
	EV_STAT_MAX,
};

/* Probes on busy code see many distinct user stacks: more buckets for those than for kernel stacks. */
COUNTS_MAP(counts_0, struct event_key, struct event_value);
COUNTS_MAP(counts_1, struct event_key, struct event_value);
STACK_MAP(user_stacks_0, 16384);
STACK_MAP(user_stacks_1, 16384);
STACK_MAP(kern_stacks_0, 4096);
STACK_MAP(kern_stacks_1, 4096);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EV_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count_stat(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &index);

	if (value)
		*value += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline void stack_lost(__s32 id, __u32 collision, __u32 other)
{
	if (id < 0 && id != -14 /* EFAULT: no user stack (kernel thread) */)
		count_stat(id == -17 /* EEXIST */ ? collision : other);
}

/* False if the current task is filtered out (counted as such). */
static __always_inline int event_wanted(__u32 pid)
{
	if (filter_by_pid && !bpf_map_lookup_elem(&filter_pids, &pid)) {
		count_stat(EV_STAT_FILTERED);
		return 0;
	}
	return 1;
}

/*
 * Add `value` to the current task's (stacks, caller) entry. `ctx` is what the
 * stack helpers need: pt_regs for (u)probes, the argument array for tracing programs.
 */
static __always_inline void count_event(void *ctx, __u64 value, int kernel_stack, __u64 caller)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct event_key key = {};
	struct event_value init = {};
	struct event_value *entry;
	__u32 buffer;
	void *counts;

	key.pid = pid_tgid >> 32;
	key.tid = (__u32)pid_tgid;
	key.caller = caller;
	obi_trace_context(pid_tgid, &key.trace);
	bpf_get_current_comm(init.comm, sizeof(init.comm));
	announce_pid(key.pid, init.comm);

	buffer = active_buffer & 1;
	key.kern_stack_id = -1;
	if (kernel_stack) {
		key.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
		stack_lost(key.kern_stack_id, EV_STAT_KSTACK_COLLISION, EV_STAT_KSTACK_ERROR);
	}
	key.user_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks),
					    BPF_F_USER_STACK);
	stack_lost(key.user_stack_id, EV_STAT_USTACK_COLLISION, EV_STAT_USTACK_ERROR);

	counts = BUFFER_MAP(buffer, counts);
	entry = bpf_map_lookup_elem(counts, &key);
	if (entry) {
		__sync_fetch_and_add(&entry->value, value);
		return;
	}
	init.value = value;
	if (bpf_map_update_elem(counts, &key, &init, BPF_NOEXIST) == 0)
		return;
	/* Another CPU inserted the same key first: add to its entry. */
	entry = bpf_map_lookup_elem(counts, &key);
	if (entry) {
		__sync_fetch_and_add(&entry->value, value);
		return;
	}
	count_stat(EV_STAT_COUNTS_FULL);
}

#endif
