/* SPDX-License-Identifier: GPL-2.0 */
/*
 * New processes, announced to userspace: every program that counts stacks calls
 * announce_pid() so that userspace reads a process's maps while it still runs.
 *
 * `new_pids` is drained by userspace at most every 100 ms, when a record in `wakeups` wakes
 * it (wake_userspace: an idle host costs no polling). `seen_pids` keeps the comm each
 * pid was announced with: a changed comm announces it again. An exec keeps the pid and
 * the start time, and often the comm (a program that re-execs itself): the
 * sched_process_exec tracepoint (exec.bpf.c, loaded beside each sampler and sharing these
 * maps) announces it as ANNOUNCE_EXEC, so that userspace rereads the new image's maps.
 */
#ifndef HOTSTACK_PIDS_H
#define HOTSTACK_PIDS_H

#include "schema.h"

HS_PIDS_VARIABLES
HS_PIDS_MAPS

/* Wake the userspace thread that waits on `wakeups` (without BPF_RB_NO_WAKEUP the kernel
 * notifies only when userspace has read everything before: one wakeup per batch). */
static __always_inline void wake_userspace(void)
{
	__u32 why = 0;

	bpf_ringbuf_output(&wakeups, &why, sizeof(why), 0);
}

#define NU_WAKE_USERSPACE() wake_userspace()

/* Whether `pid` is sampled. With filter_by_pid, only the pids in filter_pids are, unless the map
 * holds key 0 (no process's pid): that opens it to every pid. A filter set at run time (the agent's
 * targets, sampling/sampler.py set_kernel_pids) starts open and is closed once its pids are in. */
static __always_inline int pid_allowed(__u32 pid)
{
	__u32 every_pid = 0;

	return !filter_by_pid || bpf_map_lookup_elem(&filter_pids, &pid) ||
	       bpf_map_lookup_elem(&filter_pids, &every_pid);
}

/* `comm` is the task's COMM_LEN-byte, zero-padded name (bpf_get_current_comm). */
static __always_inline void announce_pid(__u32 pid, const char *comm)
{
	__u64 comm_words[2];
	__u64 *seen_comm;
	__u8 one = ANNOUNCE_NEW;

	if (pid == 0)
		return;
	__builtin_memcpy(comm_words, comm, sizeof(comm_words));
	seen_comm = bpf_map_lookup_elem(&seen_pids, &pid);
	if (!seen_comm || seen_comm[0] != comm_words[0] || seen_comm[1] != comm_words[1]) {
		bpf_map_update_elem(&seen_pids, &pid, comm_words, BPF_ANY);
		/* NOEXIST: an exec announced and not drained yet stays an exec. */
		bpf_map_update_elem(&new_pids, &pid, &one, BPF_NOEXIST);
		wake_userspace();
	}
}

/* After an exec, in the new image. Loaded where the kernel has BTF (else exec shows only
 * through a changed comm); `allowed` is the program's pid filter. */
static __always_inline void announce_exec(int allowed)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u8 exec = ANNOUNCE_EXEC;

	if (!allowed)
		return;
	bpf_map_delete_elem(&seen_pids, &pid);
	bpf_map_update_elem(&new_pids, &pid, &exec, BPF_ANY);
	wake_userspace();
}

#endif
