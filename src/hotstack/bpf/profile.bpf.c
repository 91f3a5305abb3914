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
 * Two ways to get a user stack (unwind/__init__.py has the measurements behind the choice):
 *  - frame pointers (default, cheapest): bpf_get_stackid(BPF_F_USER_STACK) into
 *    user_stacks_<buffer>, counted in counts_<buffer> under struct stack_key.
 *  - snapshot ("dwarf"), for processes in `snapshot_pids` (snapshot_mode 1) or for
 *    every process (snapshot_mode 2): the sample is not counted in the kernel;
 *    one record goes to the `snapshots` ring buffer instead, and userspace unwinds
 *    it with .eh_frame tables. If the ring is full the sample falls back to the
 *    frame-pointer path (counted in STAT_SNAPSHOT_RING_FULL), so none is lost.
 *
 * Transport (bpf/schema.yaml; userspace: sampling/buffers.py and sampling/snapshots.py):
 *   counts_<b>:  struct stack_key -> struct stack_count   (frame-pointer samples)
 *   snapshots:   BPF ring buffer of struct snapshot records, one per sample: the key
 *                (user_stack_id -1: the stack is in the record), comm, the buffer whose stack
 *                maps the key's ids refer to, the user registers and a copy of the stack.
 *   A field added to struct stack_key travels through both paths unchanged.
 *
 * A third way (SNAPSHOT_NATIVE, `--unwind kernel`): the user stack is unwound here, in the
 * kernel, with .eh_frame tables in BPF maps (native_unwind.h); the walk goes on in
 * profile_native_step (tail calls), which stores the stack and counts the sample
 * (native_count.h).
 *   Userspace drains `snapshots` often (unwinding the copies as they come), keeps
 *   the records' keys until their buffer is drained, and clears the stack maps of
 *   a buffer only after that.
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "schema.h"
#include "python.h"
#include "obi.h"
#include "pids.h"
#include "counts.h"
/* V8 (Node.js) frames: recorded by the kernel unwinder's runtime hook (bpf/v8.h). */
#include "v8.h"
#define NU_RUNTIME_FRAME(pc, fp, index) v8_frame(pc, fp, index)
#define NU_RUNTIME_END(key, buffer)                                                                \
	do {                                                                                       \
		__u64 v8_key = v8_finish(buffer);                                                  \
		if (v8_key && !(key)->runtime_stack)                                               \
			(key)->runtime_stack = v8_key;                                             \
	} while (0)
#include "native_count.h"

HS_CPU_VARIABLES
HS_CPU_MAPS

/*
 * Copy the user stack from sp upwards: the rest of sp's page, then whole pages
 * until SNAPSHOT_PAGES are read or one faults (the top of the stack). Page by
 * page because a read that crosses into an unmapped page fails as a whole.
 */
static __always_inline __u32 copy_user_stack(struct snapshot *rec, __u64 sp)
{
	/* 1..PAGE_BYTES; the check below is always false and gives the verifier its bound. */
	__u32 first = PAGE_BYTES - (sp & (PAGE_BYTES - 1));

	if (first > PAGE_BYTES)
		return 0;
	if (bpf_probe_read_user(rec->stack, first, (void *)sp))
		return 0;
#define COPY_PAGE(n)                                                                               \
	if (bpf_probe_read_user(rec->stack + first + (n) * PAGE_BYTES, PAGE_BYTES,                 \
				(void *)(sp + first + (n) * PAGE_BYTES)))                          \
		return first + (n) * PAGE_BYTES;
	COPY_PAGE(0)
	COPY_PAGE(1)
	COPY_PAGE(2)
	COPY_PAGE(3)
#undef COPY_PAGE
	return first + SNAPSHOT_PAGES * PAGE_BYTES;
}

/* The user registers of the current task: the sample's own if it hit user mode. */
static __always_inline int user_regs(struct bpf_perf_event_data *ctx, int in_kernel, struct pt_regs *out)
{
	if (!in_kernel) {
		out->rip = ctx->regs.rip;
		out->rsp = ctx->regs.rsp;
		out->rbp = ctx->regs.rbp;
		return 0;
	}
	return native_task_user_regs(out);
}

static __always_inline int wants_snapshot(__u32 pid)
{
	if (snapshot_mode == SNAPSHOT_NATIVE)
		return 0;
	if (snapshot_mode == 2)
		return pid != 0;
	return snapshot_mode == 1 && bpf_map_lookup_elem(&snapshot_pids, &pid);
}

/* Send the sample as a snapshot record; 0 if sent, else the caller counts it as usual. */
static __always_inline int send_snapshot(struct bpf_perf_event_data *ctx, struct stack_key *key,
					 const char *comm, __u32 buffer, int in_kernel)
{
	struct snapshot *rec;
	struct pt_regs regs = {};

	if (user_regs(ctx, in_kernel, &regs)) {
		count_stat(STAT_SNAPSHOT_NO_REGS);
		return -1;
	}
	rec = bpf_ringbuf_reserve(&snapshots, sizeof(*rec), 0);
	if (!rec) {
		count_stat(STAT_SNAPSHOT_RING_FULL);
		return -1;
	}
	rec->key = *key;
	rec->key.user_stack_id = -1;
	__builtin_memcpy(rec->comm, comm, COMM_LEN);
	rec->buffer = buffer;
	rec->ip = regs.rip;
	rec->sp = regs.rsp;
	rec->bp = regs.rbp;
	rec->stack_len = copy_user_stack(rec, regs.rsp);
	bpf_ringbuf_submit(rec, 0);
	count_stat(STAT_SNAPSHOTS);
	return 0;
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
	int in_kernel, snapshot;

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
	in_kernel = (ctx->regs.cs & 3) == 0;

	key.kern_stack_id = -1;
	if (collect_kernel_stacks && in_kernel) {
		key.kern_stack_id = bpf_get_stackid(ctx, BUFFER_MAP(buffer, kern_stacks), 0);
		stack_lost(key.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	}

	snapshot = collect_user_stacks && key.pid != 0 && wants_snapshot(key.pid);
	key.user_stack_id = -1;
	if (snapshot_mode == SNAPSHOT_NATIVE && collect_user_stacks && key.pid != 0) {
		struct pt_regs regs = {};

		/* a kernel thread (no user registers) has no user stack: -1, not a loss */
		if (user_regs(ctx, in_kernel, &regs) == 0) {
			key.runtime_stack = python_walk(key.pid, key.tid, buffer);
			v8_begin(key.pid);
			if (native_begin(ctx, &key, comm, buffer, 1, regs.rip, regs.rsp, regs.rbp) == 0)
				return 0;
		}
		count_stack(&key, comm, 1, buffer);
		return 0;
	}
	if (collect_user_stacks && key.pid != 0 && !snapshot)
		key.user_stack_id = fp_user_stack(ctx, buffer, in_kernel);

	/*
	 * ---- OTHER FRAME SOURCES GO HERE ----
	 * The native user stack is decided above (key.user_stack_id, or a snapshot
	 * below). Interpreter unwinders (e.g. CPython, bpf/python.h) run here and
	 * record what they find in fields of `key` (struct stack_key), which both
	 * the in-kernel counts and the snapshot records carry. Use your own
	 * per-CPU array map for scratch space: the BPF stack is 512 bytes and this
	 * function already uses about 100 of them.
	 */
	if (collect_user_stacks && key.pid != 0)
		key.runtime_stack = python_walk(key.pid, key.tid, buffer);

	if (snapshot && send_snapshot(ctx, &key, comm, buffer, in_kernel) == 0)
		return 0;
	if (snapshot && collect_user_stacks)   /* no room for a snapshot: the frame-pointer stack */
		key.user_stack_id = fp_user_stack(ctx, buffer, in_kernel);
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
