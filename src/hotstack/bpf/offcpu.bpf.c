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
 *
 * With the kernel unwinder (unwind_in_kernel), the user stack is walked from the registers the
 * thread entered the kernel with, by offcpu_native_step (tail calls); the walk ends by writing
 * its stack id into the thread's off_cpu entry, which switch-in later counts as usual.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "arch.h"

/* Off-CPU stacks are many and long-lived: as many user-stack buckets as probes use. */
#define USER_STACK_ENTRIES 16384
#define KERN_STACK_ENTRIES 4096

#include "schema.h"
#include "obi.h"
#include "pids.h"
#include "counts.h"
#include "native_count.h"

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
	struct arch_regs regs = {};
	struct stack_key key = {};

	entry.pid = pid;
	entry.buffer = buffer;
	entry.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
	stack_lost(entry.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	bpf_get_current_comm(entry.comm, sizeof(entry.comm));
	announce_pid(pid, tid, entry.comm);
	obi_trace_context(pid_tgid, &entry.trace);
	entry.since = bpf_ktime_get_ns();
	if (!user_stack_wanted(pid)) {
		entry.user_stack_id = -1;
		bpf_map_update_elem(&off_cpu_threads, &tid, &entry, BPF_ANY);
		return;
	}
	if (!unwind_in_kernel) {
		entry.user_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks), BPF_F_USER_STACK);
		stack_lost(entry.user_stack_id, STAT_USTACK_COLLISION, STAT_USTACK_ERROR);
		bpf_map_update_elem(&off_cpu_threads, &tid, &entry, BPF_ANY);
		return;
	}
	key.pid = pid;
	key.tid = tid;
	if (native_task_user_regs(&regs)) {
		/* no saved user registers to walk from (no bpf_task_pt_regs before 5.15): frame
		 * pointers; a kernel thread has no user stack (-1) */
		native_store_fp_stack(ctx, &key, buffer);
		entry.user_stack_id = key.user_stack_id;
		bpf_map_update_elem(&off_cpu_threads, &tid, &entry, BPF_ANY);
		return;
	}
	/* stored now with no user stack; offcpu_native_step fills it in */
	entry.user_stack_id = -1;
	bpf_map_update_elem(&off_cpu_threads, &tid, &entry, BPF_ANY);
	/* the value word carries the switch-out time: the step checks it is still this entry */
	native_begin(ctx, &key, entry.comm, buffer, entry.since, &regs);
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

	/* switch-in first: switch-out may end in a tail call, which does not come back */
	bpf_probe_read_kernel(&next_tid, sizeof(next_tid), (void *)ctx[2] + task_pid_offset);
	if (next_tid != 0)
		switch_in(next_tid);

	if (prev_tid != 0 && pid_wanted(pid_tgid >> 32) &&
	    (threshold == 0xffffffff || bpf_get_prandom_u32() <= threshold))
		switch_out(ctx, pid_tgid, pid_tgid >> 32, prev_tid);
	return 0;
}

/* The rest of a kernel-unwound switch-out: more frames, then the stack id into the thread's entry. */
SEC("tp_btf/sched_switch")
int offcpu_native_step(__u64 *ctx)
{
	struct stack_key key;
	char comm[COMM_LEN];
	struct off_cpu *entry;
	__u32 buffer;
	__u64 since;

	if (native_step_and_store(ctx, &key, comm, &buffer, &since, 0, 1))
		return 0;
	entry = bpf_map_lookup_elem(&off_cpu_threads, &key.tid);
	if (entry && entry->since == since)
		entry->user_stack_id = key.user_stack_id;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
