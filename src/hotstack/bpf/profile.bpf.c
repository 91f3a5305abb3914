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
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#define MAX_STACK_DEPTH 127
#define COMM_LEN 16

struct sample_key {
	__u32 pid;
	__u32 tid;
	__s32 user_stack_id;
	__s32 kern_stack_id;
};

struct sample_value {
	__u64 count;
	char comm[COMM_LEN];
};

/* Indexes of the per-CPU `stats` counters; mirrored in sampling/layout.py. */
enum stat_index {
	STAT_SAMPLES = 0,        /* samples seen by the program */
	STAT_IDLE,               /* dropped: idle task (tid 0) */
	STAT_FILTERED,           /* dropped: --pid / --comm filters */
	STAT_COUNTS_FULL,        /* dropped: counts map full */
	STAT_USTACK_COLLISION,   /* user stack lost: stack map bucket taken */
	STAT_KSTACK_COLLISION,   /* kernel stack lost: stack map bucket taken */
	STAT_USTACK_ERROR,       /* user stack lost: other error (no mm, fault) */
	STAT_KSTACK_ERROR,       /* kernel stack lost: other error */
	STAT_MAX,
};

const volatile __u32 filter_by_pid = 0;
const volatile __u32 filter_by_comm = 0;
const volatile __u32 include_idle = 0;
const volatile __u32 collect_user_stacks = 1;
const volatile __u32 collect_kernel_stacks = 1;

/* Which of the two buffers the program writes to (0 or 1); set by userspace. */
volatile __u32 active_buffer = 0;

#define COUNTS_MAP(name)                                  \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_HASH);          \
		__uint(max_entries, 16384);               \
		__type(key, struct sample_key);           \
		__type(value, struct sample_value);       \
	} name SEC(".maps")

#define STACK_MAP(name)                                   \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);   \
		__uint(max_entries, 8192);                \
		__uint(key_size, sizeof(__u32));          \
		__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64)); \
	} name SEC(".maps")

COUNTS_MAP(counts_0);
COUNTS_MAP(counts_1);
STACK_MAP(user_stacks_0);
STACK_MAP(user_stacks_1);
STACK_MAP(kern_stacks_0);
STACK_MAP(kern_stacks_1);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} filter_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, char[COMM_LEN]);
	__type(value, __u8);
} filter_comms SEC(".maps");

/*
 * Processes seen for the first time are announced in `new_pids`, which userspace
 * drains often, so that it reads their maps while they still exist.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} seen_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} new_pids SEC(".maps");

static __always_inline void count_stat(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &index);

	if (value)
		*value += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline int stack_lost(__s32 id, __u32 collision, __u32 other)
{
	if (id >= 0)
		return 0;
	count_stat(id == -17 /* EEXIST */ ? collision : other);
	return 1;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct sample_key key = {};
	struct sample_value init = {};
	struct sample_value *value;
	char comm[COMM_LEN] = {};
	__u32 buffer;
	void *counts;
	int in_kernel;

	key.pid = pid_tgid >> 32;
	key.tid = (__u32)pid_tgid;

	count_stat(STAT_SAMPLES);
	if (key.tid == 0 && !include_idle) {
		count_stat(STAT_IDLE);
		return 0;
	}
	if (filter_by_pid && !bpf_map_lookup_elem(&filter_pids, &key.pid)) {
		count_stat(STAT_FILTERED);
		return 0;
	}
	bpf_get_current_comm(comm, sizeof(comm));
	if (filter_by_comm && !bpf_map_lookup_elem(&filter_comms, comm)) {
		count_stat(STAT_FILTERED);
		return 0;
	}

	if (key.pid != 0 && !bpf_map_lookup_elem(&seen_pids, &key.pid)) {
		__u8 one = 1;

		bpf_map_update_elem(&seen_pids, &key.pid, &one, BPF_ANY);
		bpf_map_update_elem(&new_pids, &key.pid, &one, BPF_ANY);
	}

	buffer = active_buffer & 1;
	/* A sample taken in user mode has no kernel stack: do not ask for one. */
	in_kernel = (ctx->regs.cs & 3) == 0;

	key.kern_stack_id = -1;
	if (collect_kernel_stacks && in_kernel) {
		key.kern_stack_id = bpf_get_stackid(ctx, buffer ? (void *)&kern_stacks_1 : (void *)&kern_stacks_0, 0);
		stack_lost(key.kern_stack_id, STAT_KSTACK_COLLISION, STAT_KSTACK_ERROR);
	}
	key.user_stack_id = -1;
	if (collect_user_stacks && key.pid != 0) {
		key.user_stack_id = bpf_get_stackid(ctx, buffer ? (void *)&user_stacks_1 : (void *)&user_stacks_0,
						    BPF_F_USER_STACK);
		/* Kernel threads have no user stack: -EFAULT there is not a loss. */
		if (key.user_stack_id == -14 && in_kernel)
			key.user_stack_id = -1;
		else
			stack_lost(key.user_stack_id, STAT_USTACK_COLLISION, STAT_USTACK_ERROR);
	}

	counts = buffer ? (void *)&counts_1 : (void *)&counts_0;
	value = bpf_map_lookup_elem(counts, &key);
	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		return 0;
	}
	init.count = 1;
	__builtin_memcpy(init.comm, comm, sizeof(comm));
	if (bpf_map_update_elem(counts, &key, &init, BPF_NOEXIST) == 0)
		return 0;
	/* Another CPU inserted the same key first: add to its entry. */
	value = bpf_map_lookup_elem(counts, &key);
	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		return 0;
	}
	count_stat(STAT_COUNTS_FULL);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
