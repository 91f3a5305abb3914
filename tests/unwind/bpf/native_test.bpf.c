// SPDX-License-Identifier: GPL-2.0
/*
 * A standalone on-CPU sampler around bpf/native_unwind.h, for tests and benchmarks of the
 * kernel unwinder alone: every sample of `target_tgid` (0: every process) is unwound in the
 * kernel and counted per (pid, tid, stack); stacks are kept by their hash.
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "native_unwind.h"

const volatile __u32 target_tgid = 0;
const volatile __u32 target_by_comm = 0;
const volatile char target_comm[16] = {};

struct count_key {
	__u32 pid;
	__u32 tid;
	__u64 stack;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct nu_stack);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct count_key);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void finish(struct nu_state *st)
{
	struct count_key key = {};
	__u64 one = 1, *count;

	nu_count_end(st);
	key.pid = st->ctx_words[0] >> 32;
	key.tid = (__u32)st->ctx_words[0];
	key.stack = nu_hash(st);
	bpf_map_update_elem(&stacks, &key.stack, &st->stack, BPF_NOEXIST);
	count = bpf_map_lookup_elem(&counts, &key);
	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
}

SEC("perf_event")
int nu_test_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct arch_regs regs = {};
	struct nu_state *st;

	if (!tgid || (target_tgid && tgid != target_tgid))
		return 0;
	if (target_by_comm) {
		char comm[16] = {};
		int i;

		bpf_get_current_comm(comm, sizeof(comm));
		for (i = 0; i < 16; i++) {
			if (comm[i] != target_comm[i])
				return 0;
			if (!comm[i])
				break;
		}
	}
	if (ARCH_REGS_USER_MODE(&ctx->regs)) {
		arch_regs_load(&regs, &ctx->regs);
	} else {
		arch_user_regs *user = (arch_user_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		if (!user || arch_regs_read_kernel(&regs, user))
			return 0;
	}
	st = nu_begin(tgid, &regs);
	if (!st)
		return 0;
	st->ctx_words[0] = pid_tgid;
	bpf_tail_call(ctx, &nu_progs, 0);
	nu_count(NU_STAT_TAIL_CALL_FAILED);
	return 0;
}

SEC("perf_event")
int nu_test_step(struct bpf_perf_event_data *ctx)
{
	struct nu_state *st = nu_state();

	if (!st)
		return 0;
	if (!nu_steps(st, 0, 1))
		bpf_tail_call(ctx, &nu_progs, 0);
	finish(st);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
