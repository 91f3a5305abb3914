// SPDX-License-Identifier: GPL-2.0
/*
 * Probe hits: the stack of every call of a probed function, counted.
 *
 * One program per kind of link; the loader attaches the same program to every
 * link of its kind (uprobe/uretprobe via perf events, kprobe/kretprobe via
 * perf events where the kernel has kprobes). fentry/fexit are templates: one
 * instance is loaded per kernel function, with that function's BTF id, for
 * kernels without kprobes.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "event_counts.h"

static __always_inline int hit(void *ctx, int kernel_stack, __u64 caller)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	count_stat(EV_STAT_EVENTS);
	if (!event_wanted(pid))
		return 0;
	count_event(ctx, 1, kernel_stack, caller);
	return 0;
}

/* At a function's first instruction the return address is on top of the stack. */
SEC("uprobe")
int probe_uprobe(struct pt_regs *ctx)
{
	__u64 caller = 0;

	bpf_probe_read_user(&caller, sizeof(caller), (void *)PT_REGS_SP(ctx));
	return hit(ctx, 0, caller);
}

SEC("uretprobe")
int probe_uretprobe(struct pt_regs *ctx)
{
	return hit(ctx, 0, 0);
}

SEC("kprobe")
int probe_kprobe(struct pt_regs *ctx)
{
	return hit(ctx, 1, 0);
}

SEC("fentry")
int probe_fentry(void *ctx)
{
	return hit(ctx, 1, 0);
}

SEC("fexit")
int probe_fexit(void *ctx)
{
	return hit(ctx, 1, 0);
}

char LICENSE[] SEC("license") = "GPL";
