// SPDX-License-Identifier: GPL-2.0
/*
 * Probe hits: the stack of every call of a probed function, counted.
 *
 * One program per kind of link; the loader attaches the same program to every
 * link of its kind (uprobe/uretprobe via perf events, kprobe/kretprobe via
 * perf events where the kernel has kprobes). fentry/fexit are templates: one
 * instance is loaded per kernel function, with that function's BTF id, for
 * kernels without kprobes.
 *
 * `caller` (struct stack_key) is the return address on top of the user stack, read only by
 * uprobes at a function's first instruction: there the frame-pointer walk starts at the
 * caller's frame and would skip the caller itself.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "arch.h"

/* Probes on busy code see many distinct user stacks: more buckets for those than for kernel stacks. */
#define USER_STACK_ENTRIES 16384
#define KERN_STACK_ENTRIES 4096

#include "schema.h"
#include "obi.h"
#include "pids.h"
#include "counts.h"
#include "native_count.h"

/* `user_regs`: the user registers are ctx's (uprobes); 0: kernel probes, whose user stacks are
 * frame-pointer walks (fentry/fexit cannot tail-call a step program of another attach target). */
static __always_inline int hit(void *ctx, int kernel_stack, __u64 caller, int user_regs)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct stack_key key = {};
	char comm[COMM_LEN] = {};
	__u32 buffer;

	key.pid = pid_tgid >> 32;
	key.tid = (__u32)pid_tgid;
	count_stat(STAT_SAMPLES);
	if (!pid_wanted(key.pid))
		return 0;
	key.caller = caller;
	obi_trace_context(pid_tgid, &key.trace);
	bpf_get_current_comm(comm, sizeof(comm));
	announce_pid(key.pid, key.tid, comm);

	buffer = active_buffer & 1;
	key.kern_stack_id = -1;
	if (kernel_stack) {
		key.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
		stack_lost(key.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	}
	if (!user_stack_wanted(key.pid)) {
		key.user_stack_id = -1;
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	if (unwind_in_kernel && user_regs) {
		/* --unwind kernel: the walk starts at the probed instruction itself, so the caller of a
		 * function probed at its entry is found from the table (no `caller` needed) */
		struct arch_regs regs;

		key.caller = 0;
		arch_regs_load(&regs, ARCH_REGS(ctx));
		if (native_begin(ctx, &key, comm, buffer, 1, &regs) == 0)
			return 0;
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	if (unwind_in_kernel) {
		/* kernel probes: their stack maps hold native stacks; this one by frame pointers */
		native_store_fp_stack(ctx, &key, buffer);
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	key.user_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks), BPF_F_USER_STACK);
	stack_lost(key.user_stack_id, STAT_USTACK_COLLISION, STAT_USTACK_ERROR);
	count_stack(&key, comm, 1, buffer);
	return 0;
}

/* The rest of a kernel-unwound probe hit (uprobes and uretprobes share the program type). */
SEC("uprobe")
int probe_native_step(struct pt_regs *ctx)
{
	return native_step_and_count(ctx, 0, 1);
}

/* At a function's first instruction the return address is on top of the stack (x86) or in the
 * link register (arm64). */
SEC("uprobe")
int probe_uprobe(struct pt_regs *ctx)
{
	__u64 caller = 0;

	ARCH_ENTRY_RETURN_ADDRESS(ARCH_REGS(ctx), &caller);
	return hit(ctx, 0, caller, 1);
}

SEC("uretprobe")
int probe_uretprobe(struct pt_regs *ctx)
{
	return hit(ctx, 0, 0, 1);
}

SEC("kprobe")
int probe_kprobe(struct pt_regs *ctx)
{
	return hit(ctx, 1, 0, 0);
}

SEC("fentry")
int probe_fentry(void *ctx)
{
	return hit(ctx, 1, 0, 0);
}

SEC("fexit")
int probe_fexit(void *ctx)
{
	return hit(ctx, 1, 0, 0);
}

char LICENSE[] SEC("license") = "GPL";
