// SPDX-License-Identifier: GPL-2.0
/*
 * Off-CPU time: the stacks of threads while they are off the CPU, weighted by
 * how long they were off it.
 *
 * One BTF tracepoint, sched_switch, does both halves (no tracefs, no kprobes, no
 * fentry: kernels that refuse BPF trampolines still offer it). It runs in the
 * context of the thread leaving the CPU (`prev`): its stacks are captured then,
 * with the time and the buffer they were stored in. When the same thread is
 * switched back in (it is then `next`), the time it spent away is added to those
 * stacks, in the buffer they were captured in. Userspace keeps the stacks of
 * threads still off the CPU when it drains a buffer (see sampling/offcpu.py).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "event_counts.h"

/* Record a switch-out when bpf_get_prandom_u32() <= threshold (0xffffffff: every one). */
const volatile __u32 threshold = 0xffffffff;
/* Byte offset of task_struct.pid (the thread id), read from the kernel's BTF by the loader. */
const volatile __u32 task_pid_offset = 0;

struct off_cpu {
	__u64 since;            /* time the thread left the CPU (ns) */
	__s32 user_stack_id;
	__s32 kern_stack_id;
	__u32 pid;
	__u32 buffer;           /* the buffer whose stack maps hold the ids */
	char comm[COMM_LEN];
	struct obi_trace_context trace;   /* its OBI span when it left (obi.h) */
};

/* Threads off the CPU. LRU: a thread that exits while switched out never comes back. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);     /* tid */
	__type(value, struct off_cpu);
} off_cpu_threads SEC(".maps");

static __always_inline void switch_out(void *ctx, __u64 pid_tgid, __u32 pid, __u32 tid)
{
	struct off_cpu entry = {};
	__u32 buffer = active_buffer & 1;

	entry.pid = pid;
	entry.buffer = buffer;
	entry.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
	stack_lost(entry.kern_stack_id, EV_STAT_KSTACK_COLLISION, EV_STAT_KSTACK_ERROR);
	entry.user_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks),
					      BPF_F_USER_STACK);
	stack_lost(entry.user_stack_id, EV_STAT_USTACK_COLLISION, EV_STAT_USTACK_ERROR);
	bpf_get_current_comm(entry.comm, sizeof(entry.comm));
	announce_pid(pid, entry.comm);
	obi_trace_context(pid_tgid, &entry.trace);
	entry.since = bpf_ktime_get_ns();
	bpf_map_update_elem(&off_cpu_threads, &tid, &entry, BPF_ANY);
}

static __always_inline void switch_in(__u32 tid)
{
	struct off_cpu *found = bpf_map_lookup_elem(&off_cpu_threads, &tid);
	struct off_cpu entry;
	struct event_key key = {};
	struct event_value init = {};
	struct event_value *value;
	void *counts;
	__u64 off;

	if (!found)
		return;
	entry = *found;   /* copied before the delete frees it */
	bpf_map_delete_elem(&off_cpu_threads, &tid);
	off = bpf_ktime_get_ns() - entry.since;
	key.pid = entry.pid;
	key.tid = tid;
	key.user_stack_id = entry.user_stack_id;
	key.kern_stack_id = entry.kern_stack_id;
	key.trace = entry.trace;
	counts = BUFFER_MAP(entry.buffer, counts);

	count_stat(EV_STAT_EVENTS);
	value = bpf_map_lookup_elem(counts, &key);
	if (value) {
		__sync_fetch_and_add(&value->value, off);
		return;
	}
	init.value = off;
	__builtin_memcpy(init.comm, entry.comm, sizeof(init.comm));
	if (bpf_map_update_elem(counts, &key, &init, BPF_NOEXIST) == 0)
		return;
	value = bpf_map_lookup_elem(counts, &key);
	if (value) {
		__sync_fetch_and_add(&value->value, off);
		return;
	}
	count_stat(EV_STAT_COUNTS_FULL);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, ...) */
SEC("tp_btf/sched_switch")
int offcpu_sched_switch(__u64 *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 prev_tid = (__u32)pid_tgid;
	__u32 next_tid = 0;

	if (prev_tid != 0 && event_wanted(pid_tgid >> 32) &&
	    (threshold == 0xffffffff || bpf_get_prandom_u32() <= threshold))
		switch_out(ctx, pid_tgid, pid_tgid >> 32, prev_tid);

	bpf_probe_read_kernel(&next_tid, sizeof(next_tid), (void *)ctx[2] + task_pid_offset);
	if (next_tid != 0)
		switch_in(next_tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
