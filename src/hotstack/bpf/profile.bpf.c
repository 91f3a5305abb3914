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
 *
 * Interpreter frames (CPython, Ruby, PHP, Perl) are walked by one program per interpreter,
 * profile_walk_<name>, reached by a tail call through rt_progs for a process its frame source
 * listed. Userspace loads a walker only once a process of its interpreter is found: verifying
 * one costs the kernel 80k-320k instructions (0.1-0.7 s of CPU), the rest of this program 5k.
 * The sample's key, comm and buffer are handed over in nu_state.ctx_words (native_count.h), and
 * the walker ends the sample as this program would have: the kernel unwinder's steps, or the
 * frame-pointer stack, or the key as it is.
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
#define NU_RUNTIME_JIT_STEP(st, pc, index) hs_step(pc, index)
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

static __always_inline void rt_hand_over_native(void *ctx, __u32 pid);
#define NATIVE_BEGIN_HOOK(ctx, key) rt_hand_over_native(ctx, (key)->pid)
#include "native_count.h"

HS_CPU_VARIABLES
HS_CPU_MAPS

/* rt_progs[RT_<NAME>]: the walker of each interpreter, once userspace has loaded it. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, RT_WALKERS);
	__type(key, __u32);
	__type(value, __u32);
} rt_progs SEC(".maps");

/* How a walker ends the sample (bits 2-3 of ctx_words[NATIVE_BUFFER_WORD]; bit 0 is the buffer,
 * bit 1 whether the sample hit kernel mode). */
#define RT_THEN_NATIVE 0    /* a kernel-unwinder walk has begun: its steps go on (nu_progs) */
#define RT_THEN_FP 1        /* --unwind fp: the frame-pointer user stack, then count */
#define RT_THEN_COUNT 2     /* the user stack is already in the key: count */

/* rt_listed[RT_<NAME>]: 1 once userspace has listed a process of that interpreter (and loaded its
 * walker). An array lookup is a load; each of the four process maps' hash lookups, on every
 * sample of every process, costs ~0.4 us (1.2-1.8 us a sample). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RT_WALKERS);
	__type(key, __u32);
	__type(value, __u32);
} rt_listed SEC(".maps");

static __always_inline int rt_on(__u32 slot)
{
	__u32 *on = bpf_map_lookup_elem(&rt_listed, &slot);

	return on && *on;
}

/* The walker slot of the interpreter whose frame source listed pid, or -1. */
static __always_inline int rt_walker(__u32 pid)
{
	if (rt_on(RT_PYTHON) && bpf_map_lookup_elem(&python_procs, &pid))
		return RT_PYTHON;
	if (rt_on(RT_RUBY) && bpf_map_lookup_elem(&ruby_procs, &pid))
		return RT_RUBY;
	if (rt_on(RT_PHP) && bpf_map_lookup_elem(&php_procs, &pid))
		return RT_PHP;
	if (rt_on(RT_PERL) && bpf_map_lookup_elem(&perl_procs, &pid))
		return RT_PERL;
	return -1;
}

/* In a begun kernel-unwinder walk (native_begin): to pid's interpreter walker, if any is loaded;
 * returns if there is none (the caller goes on to the steps). */
static __always_inline void rt_hand_over_native(void *ctx, __u32 pid)
{
	int walker = rt_walker(pid);

	if (walker >= 0)
		bpf_tail_call(ctx, &rt_progs, walker);
}

/* Elsewhere: the sample handed to pid's interpreter walker, which counts it; returns if there is
 * no walker to go to (the caller counts it). */
static __always_inline void rt_hand_over(void *ctx, struct stack_key *key, const char *comm, __u32 buffer,
					 int in_kernel, __u64 then)
{
	int walker = rt_walker(key->pid);
	struct nu_state *st;

	if (walker < 0)
		return;
	st = nu_state();
	if (!st)
		return;
	native_ctx_save(st, key, comm, buffer | (in_kernel ? 2 : 0) | (then << 2), 1);
	bpf_tail_call(ctx, &rt_progs, walker);
}

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

	announce_pid(key.pid, key.tid, comm);

	buffer = active_buffer & 1;
	/* A sample taken in user mode has no kernel stack: do not ask for one. */
	in_kernel = !ARCH_REGS_USER_MODE(&ctx->regs);

	key.kern_stack_id = -1;
	if (collect_kernel_stacks && in_kernel) {
		key.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
		stack_lost(key.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	}

	key.user_stack_id = -1;
	if (collect_user_stacks && user_stack_wanted(key.pid) && unwind_in_kernel) {
		struct arch_regs regs = {};

		if (user_regs(ctx, in_kernel, &regs) == 0) {
			/* the interpreters' bytecode offset and pointer registers: the leaf frame's line
			 * (in the kernel, the user registers are not at hand: 0, the leaf without a line) */
			v8_begin(key.pid, in_kernel ? 0 : ARCH_REGS_V8_BCO(&ctx->regs), regs.sp);
			hs_begin(key.pid, in_kernel ? 0 : ARCH_REGS_HS_BCP(&ctx->regs));
			/* (an interpreter's walker first, if pid has one: NATIVE_BEGIN_HOOK) */
			if (native_begin(ctx, &key, comm, buffer, 1, &regs) == 0)
				return 0;
		} else {
			/* in the kernel with no saved user registers to walk from (no bpf_task_pt_regs
			 * before 5.15): frame pointers; a kernel thread has no user stack (-1) */
			native_store_fp_stack(ctx, &key, buffer);
			rt_hand_over(ctx, &key, comm, buffer, in_kernel, RT_THEN_COUNT);
		}
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	if (collect_user_stacks && user_stack_wanted(key.pid)) {
		rt_hand_over(ctx, &key, comm, buffer, in_kernel, RT_THEN_FP);
		key.user_stack_id = fp_user_stack(ctx, buffer, in_kernel);
	}
	/*
	 * ---- OTHER FRAME SOURCES GO HERE ----
	 * Interpreter unwinders run in their walker programs (profile_walk_*, below)
	 * and record what they find in fields of `key` (struct stack_key). Use your
	 * own per-CPU array map for scratch space: a program's BPF stack is 512 bytes.
	 */
	count_stack(&key, comm, 1, buffer);
	return 0;
}

/* PHP's walker with the VM's registers of the sample, where it hit user mode (in the kernel the
 * VM has called out, and the frame holds its opline): a tail call keeps the sample's context. */
static __always_inline __u64 php_walk_sample(const arch_user_regs *regs, __u32 pid, __u32 buffer)
{
	__u64 vm_fp = 0, vm_ip = 0;

	if (ARCH_REGS_USER_MODE(regs)) {
		vm_fp = ARCH_REGS_PHP_FP(regs);
		vm_ip = ARCH_REGS_PHP_IP(regs);
	}
	return php_walk(pid, buffer, vm_fp, vm_ip);
}

/* An interpreter's walker (rt_progs[which]): its frames recorded in key.runtime_stack, then the
 * sample ended as the program that handed it over says (RT_THEN_*). */
static __always_inline int rt_walk(struct bpf_perf_event_data *ctx, int which, int use_loop)
{
	struct nu_state *st = nu_state();
	struct stack_key key;
	char comm[COMM_LEN];
	__u64 word, eval[4] = {};
	__u32 buffer;

	if (!st)
		return 0;
	word = native_ctx_load(st, &key, comm);
	buffer = word & 1;
	if (which == RT_PYTHON)
		key.runtime_stack = python_walk(key.pid, key.tid, buffer, use_loop, eval);
	else if (which == RT_RUBY)
		key.runtime_stack = ruby_walk(key.pid, buffer);
	else if (which == RT_PHP)
		key.runtime_stack = php_walk_sample(&ctx->regs, key.pid, buffer);
	else
		key.runtime_stack = perl_walk(key.pid, key.tid, buffer);
	if (((word >> 2) & 3) == RT_THEN_NATIVE) {
		st = nu_state();
		if (!st)
			return 0;
		st->ctx_words[__builtin_offsetof(struct stack_key, runtime_stack) / 8] = key.runtime_stack;
		st->leaf_start = eval[0];
		st->leaf_end = eval[1];
		st->leaf_part_start = eval[2];
		st->leaf_part_end = eval[3];
		bpf_tail_call(ctx, &nu_progs, 0);
		nu_count(NU_STAT_TAIL_CALL_FAILED);
		count_stat(STAT_USTACK_ERROR);
		key.user_stack_id = -2;
	} else if (((word >> 2) & 3) == RT_THEN_FP) {
		key.user_stack_id = fp_user_stack(ctx, buffer, (word >> 1) & 1);
	}
	count_stack(&key, comm, 1, buffer);
	return 0;
}

/* An interpreter's walker program: rt_walk for one interpreter (RT_<NAME>), its frames stepped
 * unrolled or by bpf_loop (use_loop). */
#define RT_WALKER_PROGRAM(name, which, use_loop)                                                   \
	SEC("perf_event")                                                                          \
	int name(struct bpf_perf_event_data *ctx)                                                  \
	{                                                                                          \
		return rt_walk(ctx, which, use_loop);                                              \
	}

RT_WALKER_PROGRAM(profile_walk_python, RT_PYTHON, 0)
/* The same walker with its frames stepped by bpf_loop, loaded instead where the kernel has it
 * (sampling/runtime_maps.py): a fraction of the verifier's work. */
RT_WALKER_PROGRAM(profile_walk_python_loop, RT_PYTHON, 1)
RT_WALKER_PROGRAM(profile_walk_ruby, RT_RUBY, 0)
RT_WALKER_PROGRAM(profile_walk_php, RT_PHP, 0)
RT_WALKER_PROGRAM(profile_walk_perl, RT_PERL, 0)

/* The rest of a kernel-unwound sample: more frames, then the stack stored and the sample counted.
 * Four variants, one in nu_progs[0] at a time (sampling/step_programs.py): without the V8/HotSpot
 * hooks from the start, and with them once userspace meets the first Node.js or JVM process; each
 * shallow (155 frames a walk) until a walk is first cut there, then deep (NU_MAX_FRAMES). Each is
 * verified when first put in place: a deep one's verification (~280k instructions, ~0.5 CPU-s)
 * is paid only on hosts whose stacks need it, the hooked ones' only on hosts that run those
 * runtimes. */
#define NATIVE_STEP_PROGRAM(name, hooks, deep)                                                     \
	SEC("perf_event")                                                                          \
	int name(struct bpf_perf_event_data *ctx)                                                  \
	{                                                                                          \
		return native_step_and_count(ctx, hooks, deep);                                    \
	}

NATIVE_STEP_PROGRAM(profile_native_step, 0, 0)
NATIVE_STEP_PROGRAM(profile_native_step_deep, 0, 1)
NATIVE_STEP_PROGRAM(profile_native_step_jit, 1, 0)
NATIVE_STEP_PROGRAM(profile_native_step_jit_deep, 1, 1)

char LICENSE[] SEC("license") = "GPL";
