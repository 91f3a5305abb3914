// SPDX-License-Identifier: GPL-2.0
/*
 * Execs, announced (pids.h): an exec keeps the pid, the start time and often the comm, but
 * replaces the image and its maps. Loaded beside each sampler program with that program's
 * seen_pids, new_pids and filter_pids maps (sampling/sampler.py), where the kernel has BTF for
 * the tracepoint; apart from the samplers so that they still load where tp_btf programs can't.
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

char LICENSE[] SEC("license") = "GPL";
