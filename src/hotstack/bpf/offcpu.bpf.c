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

/* Off-CPU stacks are many and long-lived: as many user-stack buckets as probes use. */
#define USER_STACK_ENTRIES 16384
#define KERN_STACK_ENTRIES 4096

#include "schema.h"
#include "obi.h"
#include "pids.h"
#include "counts.h"

/* threshold: record a switch-out when bpf_get_prandom_u32() <= threshold (0xffffffff: every
 * one); task_pid_offset: byte offset of task_struct.pid (the thread id), from the kernel's BTF.
 * off_cpu_threads: threads off the CPU (LRU: a thread that exits while switched out never
 * comes back). */
HS_OFFCPU_VARIABLES
HS_OFFCPU_MAPS

static __always_inline void switch_out(void *ctx, __u64 pid_tgid, __u32 pid, __u32 tid)
{
	struct off_cpu entry = {};
	__u32 buffer = active_buffer & 1;

	entry.pid = pid;
	entry.buffer = buffer;
	entry.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
	stack_lost(entry.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	entry.user_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks),
					      BPF_F_USER_STACK);
	stack_lost(entry.user_stack_id, STAT_USTACK_COLLISION, STAT_USTACK_ERROR);
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
	struct stack_key key = {};

	if (!found)
		return;
	entry = *found;   /* copied before the delete frees it */
	bpf_map_delete_elem(&off_cpu_threads, &tid);
	key.pid = entry.pid;
	key.tid = tid;
	key.user_stack_id = entry.user_stack_id;
	key.kern_stack_id = entry.kern_stack_id;
	key.trace = entry.trace;
	count_stat(STAT_SAMPLES);
	count_stack(&key, entry.comm, bpf_ktime_get_ns() - entry.since, entry.buffer);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next, ...) */
SEC("tp_btf/sched_switch")
int offcpu_sched_switch(__u64 *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 prev_tid = (__u32)pid_tgid;
	__u32 next_tid = 0;

	if (prev_tid != 0 && pid_wanted(pid_tgid >> 32) &&
	    (threshold == 0xffffffff || bpf_get_prandom_u32() <= threshold))
		switch_out(ctx, pid_tgid, pid_tgid >> 32, prev_tid);

	bpf_probe_read_kernel(&next_tid, sizeof(next_tid), (void *)ctx[2] + task_pid_offset);
	if (next_tid != 0)
		switch_in(next_tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
