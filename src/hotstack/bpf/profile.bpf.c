// SPDX-License-Identifier: GPL-2.0
/*
 * On-CPU sampler: one program attached to a cpu-clock perf event on every CPU.
 *
 * Each sample is counted in the kernel per (pid, tid, user stack, kernel stack).
 * Counts and stacks live in two buffers: the program writes into the buffer
 * named by `active_buffer`; userspace flips it, waits for in-flight programs,
 * then drains and clears the idle buffer. No sample is read twice or lost
 * between reads, and stack ids from one interval never point into another's.
 *
 * Only UAPI types are used (no CO-RE, no vmlinux.h). Tunables are .rodata
 * constants that the loader writes before loading.
 *
 * Two ways to get a user stack (`unwind_in_kernel`, from --unwind):
 *  - in the kernel (default): unwound here with .eh_frame tables in BPF maps
 *    (native_unwind.h); the walk goes on in profile_native_step (tail calls), which
 *    stores the stack in native_stacks_<buffer> and counts the sample (native_count.h).
 *  - frame pointers (--unwind fp): bpf_get_stackid(BPF_F_USER_STACK) into
 *    user_stacks_<buffer>.
 * Either way the sample is counted in counts_<buffer> under struct stack_key
 * (bpf/schema.yaml; userspace: sampling/buffers.py).
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "arch.h"
#include "schema.h"
#include "python.h"
#include "ruby.h"
#include "php.h"
#include "perl.h"
#include "obi.h"
#include "pids.h"
#include "counts.h"
/* V8 (Node.js) frames: recorded by the kernel unwinder's runtime hook (bpf/v8.h). */
#include "v8.h"
#define NU_RUNTIME_FRAME(pc, fp, index) v8_frame(pc, fp, index)
/* Java (HotSpot) frames: walked and recorded by the kernel unwinder's step hook (bpf/hotspot.h). */
#define NU_RUNTIME_JIT_STEP(st, pc, index) hs_step(st, pc, index)
#define NU_RUNTIME_END(key, buffer)                                                                \
	do {                                                                                       \
		__u64 v8_key = v8_finish(buffer);                                                  \
		__u64 hs_key = hs_finish(buffer);                                                  \
		if (v8_key && !(key)->runtime_stack)                                               \
			(key)->runtime_stack = v8_key;                                             \
		if (hs_key && !(key)->runtime_stack)                                               \
			(key)->runtime_stack = hs_key;                                             \
	} while (0)
#include "hotspot.h"
#include "native_count.h"

HS_CPU_VARIABLES
HS_CPU_MAPS

/* The user registers of the current task: the sample's own if it hit user mode. */
static __always_inline int user_regs(struct bpf_perf_event_data *ctx, int in_kernel, struct arch_regs *out)
{
	if (!in_kernel) {
		arch_regs_load(out, &ctx->regs);
		return 0;
	}
	return native_task_user_regs(out);
}

/* The frame-pointer user stack, as an id in user_stacks_<buffer>. */
static __always_inline __s32 fp_user_stack(struct bpf_perf_event_data *ctx, __u32 buffer, int in_kernel)
{
	__s32 id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, user_stacks), BPF_F_USER_STACK);

	if (id == -EFAULT && in_kernel)
		return -1;   /* a kernel thread has no user stack: not a loss */
	stack_lost(id, STAT_USTACK_COLLISION, STAT_USTACK_ERROR);
	return id;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct stack_key key = {};
	char comm[COMM_LEN] = {};
	__u32 buffer;
	int in_kernel;

	key.pid = pid_tgid >> 32;
	key.tid = (__u32)pid_tgid;
	obi_trace_context(pid_tgid, &key.trace);

	count_stat(STAT_SAMPLES);
	if (key.tid == 0 && !include_idle) {
		count_stat(STAT_IDLE);
		return 0;
	}
	if (!pid_wanted(key.pid))
		return 0;
	bpf_get_current_comm(comm, sizeof(comm));
	if (filter_by_comm && !bpf_map_lookup_elem(&filter_comms, comm)) {
		count_stat(STAT_FILTERED);
		return 0;
	}

	announce_pid(key.pid, comm);

	buffer = active_buffer & 1;
	/* A sample taken in user mode has no kernel stack: do not ask for one. */
	in_kernel = !ARCH_REGS_USER_MODE(&ctx->regs);

	key.kern_stack_id = -1;
	if (collect_kernel_stacks && in_kernel) {
		key.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
		stack_lost(key.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	}

	key.user_stack_id = -1;
	if (collect_user_stacks && key.pid != 0 && unwind_in_kernel) {
		struct arch_regs regs = {};

		key.runtime_stack = python_walk(key.pid, key.tid, buffer);
		if (!key.runtime_stack)   /* Ruby (bpf/ruby.h) */
			key.runtime_stack = ruby_walk(key.pid, buffer);
		if (!key.runtime_stack)   /* PHP (bpf/php.h) */
			key.runtime_stack = php_walk(key.pid, buffer);
		if (!key.runtime_stack)   /* Perl (bpf/perl.h) */
			key.runtime_stack = perl_walk(key.pid, key.tid, buffer);
		if (user_regs(ctx, in_kernel, &regs) == 0) {
			v8_begin(key.pid);
			hs_begin(key.pid);
			if (native_begin(ctx, &key, comm, buffer, 1, &regs) == 0)
				return 0;
		} else {
			/* in the kernel with no saved user registers to walk from (no bpf_task_pt_regs
			 * before 5.15): frame pointers; a kernel thread has no user stack (-1) */
			native_store_fp_stack(ctx, &key, buffer);
		}
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	if (collect_user_stacks && key.pid != 0)
		key.user_stack_id = fp_user_stack(ctx, buffer, in_kernel);

	/*
	 * ---- OTHER FRAME SOURCES GO HERE ----
	 * Interpreter unwinders (e.g. CPython, bpf/python.h) run here and in the
	 * branch above, and record what they find in fields of `key` (struct
	 * stack_key). Use your own per-CPU array map for scratch space: the BPF
	 * stack is 512 bytes and this function already uses about 100 of them.
	 */
	if (collect_user_stacks && key.pid != 0)
		key.runtime_stack = python_walk(key.pid, key.tid, buffer);
	if (collect_user_stacks && key.pid != 0 && !key.runtime_stack)   /* Ruby (bpf/ruby.h) */
		key.runtime_stack = ruby_walk(key.pid, buffer);
	if (collect_user_stacks && key.pid != 0 && !key.runtime_stack)   /* PHP (bpf/php.h) */
		key.runtime_stack = php_walk(key.pid, buffer);
	if (collect_user_stacks && key.pid != 0 && !key.runtime_stack)   /* Perl (bpf/perl.h) */
		key.runtime_stack = perl_walk(key.pid, key.tid, buffer);
	count_stack(&key, comm, 1, buffer);
	return 0;
}

/* The rest of a kernel-unwound sample: more frames, then the stack stored and the sample counted. */
SEC("perf_event")
int profile_native_step(struct bpf_perf_event_data *ctx)
{
	return native_step_and_count(ctx);
}

char LICENSE[] SEC("license") = "GPL";
