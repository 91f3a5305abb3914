// SPDX-License-Identifier: GPL-2.0
/*
 * Execs and exits, announced (pids.h): an exec keeps the pid, the start time and often the comm,
 * but replaces the image and its maps; an exit lets userspace forget the process without polling
 * /proc. Loaded beside each sampler program with that program's seen_pids, new_pids, gone_pids and
 * filter_pids maps (sampling/sampler.py), where the kernel has BTF for the tracepoints; apart from
 * the samplers so that they still load where tp_btf programs can't.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "schema.h"
#include "pids.h"

SEC("tp_btf/sched_process_exec")
int hotstack_exec(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	announce_exec(pid_allowed(pid));
	return 0;
}

/* Every exiting thread passes here; the process is gone when its main thread is. */
SEC("tp_btf/sched_process_exit")
int hotstack_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	if ((__u32)pid_tgid == pid_tgid >> 32)
		announce_exit(pid_tgid >> 32);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
