/* SPDX-License-Identifier: GPL-2.0 */
/*
 * New processes, announced to userspace: every program that counts stacks calls
 * announce_pid() so that userspace reads a process's maps while it still runs.
 *
 * `new_pids` is drained by userspace every 100 ms. `seen_pids` keeps the comm each
 * pid was announced with: an exec changes the comm, and the pid is announced again
 * so that userspace rereads the new image's maps (same pid, same start time).
 */
#ifndef HOTSTACK_PIDS_H
#define HOTSTACK_PIDS_H

#include "schema.h"

HS_PIDS_MAPS

/* `comm` is the task's COMM_LEN-byte, zero-padded name (bpf_get_current_comm). */
static __always_inline void announce_pid(__u32 pid, const char *comm)
{
	__u64 comm_words[2];
	__u64 *seen_comm;
	__u8 one = 1;

	if (pid == 0)
		return;
	__builtin_memcpy(comm_words, comm, sizeof(comm_words));
	seen_comm = bpf_map_lookup_elem(&seen_pids, &pid);
	if (!seen_comm || seen_comm[0] != comm_words[0] || seen_comm[1] != comm_words[1]) {
		bpf_map_update_elem(&seen_pids, &pid, comm_words, BPF_ANY);
		bpf_map_update_elem(&new_pids, &pid, &one, BPF_ANY);
	}
}

#endif
