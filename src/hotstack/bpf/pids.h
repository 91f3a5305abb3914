/* SPDX-License-Identifier: GPL-2.0 */
/*
 * New processes, announced to userspace: every program that counts stacks calls
 * announce_pid() so that userspace reads a process's maps while it still runs.
 *
 * An announcement is a record in the `wakeups` ring (struct announcement), which wakes
 * userspace (an idle host costs no polling); it reads the ring at most every 100 ms, with no
 * syscall. Only where the ring is full does the pid go to `new_pids`, a hash userspace then
 * drains (it finds the ring full): a drain of that hash at each round would scan its 4,096
 * buckets, ~90 us a round, once for each process of a loop of short commands. `seen_pids` keeps
 * the comm each
 * pid was announced with: a changed comm of its main thread announces it again. An exec
 * keeps the pid and the start time, and often the comm (a program that re-execs itself): the
 * sched_process_exec tracepoint (exec.bpf.c, loaded beside each sampler and sharing these
 * maps) marks the pid's seen_pids entry SEEN_EXECED, and its next sample announces it as
 * ANNOUNCE_EXEC, so that userspace rereads the new image's maps. Announcing the exec itself
 * had made userspace read every process that exec'ed, sampled or not (a shell loop's
 * commands, a build's compilers), and read a sampled one twice (at its exec, then at its first
 * sample: a new comm).
 */
#ifndef HOTSTACK_PIDS_H
#define HOTSTACK_PIDS_H

#include "schema.h"

HS_PIDS_VARIABLES
HS_PIDS_MAPS

static __always_inline __u64 pids_kread(__u64 addr, __u32 off)
{
	__u64 value = 0;

	if (addr)
		bpf_probe_read_kernel(&value, sizeof(value), (void *)(addr + off));
	return value;
}

/* The inode number of a task's mount namespace; 0 where not known (an exiting task has no nsproxy). */
static __always_inline __u32 task_mntns(__u64 task)
{
	__u64 nsproxy = pids_kread(task, task_off_nsproxy);
	__u32 inum = 0;

	if (nsproxy && mnt_ns_off_inum) {
		__u64 mnt_ns = pids_kread(nsproxy, nsproxy_off_mnt_ns);

		if (mnt_ns)
			bpf_probe_read_kernel(&inum, sizeof(inum), (void *)(mnt_ns + mnt_ns_off_inum));
	}
	return inum;
}

/* What userspace reads /proc/PID/stat and /proc/PID/ns/mnt of a new process for (its start time,
 * parent, main thread's name, mount namespace), and its executable's inode (whose image that name
 * is: an exec before userspace reads the process changes both), from the current task's main
 * thread. This is one look at a few kernel words; those reads cost ~110 us of the pid watcher's
 * CPU a new process under load (stat's ~90: the kernel sums the threads' times for it). Nothing
 * where the kernel's BTF gave no offsets (task_off_group_leader 0): userspace then reads /proc, as
 * it checks the first record against /proc in any case (procs/table.py ProcessTable._trust).
 * Returns the parent's mount namespace (0: not known), which the record does not carry. */
static __always_inline __u32 announcement_facts(struct announcement *record)
{
	__u64 leader, parent;

	if (!task_off_group_leader)
		return 0;
	leader = pids_kread((__u64)bpf_get_current_task(), task_off_group_leader);
	if (!leader)
		return 0;
	record->start_ns = pids_kread(leader, task_off_start_boottime);
	parent = pids_kread(leader, task_off_real_parent);
	bpf_probe_read_kernel(&record->ppid, sizeof(record->ppid), (void *)(parent + task_off_tgid));
	bpf_probe_read_kernel(record->comm, sizeof(record->comm), (void *)(leader + task_off_comm));
	record->mntns = task_mntns(leader);
	if (inode_off_ino) {
		__u64 exe = pids_kread(pids_kread(leader, task_off_mm), mm_off_exe_file);   /* 0: a kernel thread */

		record->exe_ino = pids_kread(pids_kread(exe, file_off_inode), inode_off_ino);
	}
	return parent ? task_mntns(parent) : 0;
}

/* Whether an announced process is one userspace records from the announcement alone
 * (sampling/process_watch.py _noted_from_announcement), which need not wake it. That is a process
 * of an image in plain_images, the child of a process (not init's) in its own mount namespace. A
 * child spawned into a container from outside it (`docker exec`) is read at once: its container is
 * its own. The comm is keyed up to its end: bytes after the terminating 0 may be an older name's
 * (before 6.x, __set_task_comm did not clear them). */
static __always_inline int announced_plain(const struct announcement *record, __u32 parent_mntns)
{
	struct plain_image image = {.exe_ino = record->exe_ino, .mntns = record->mntns};
	__u8 ended = 0;

	if (!record->exe_ino || !record->mntns || record->mntns != parent_mntns || record->ppid <= 1)
		return 0;
#pragma unroll
	for (int i = 0; i < COMM_LEN; i++) {
		ended |= record->comm[i] == 0;
		image.comm[i] = ended ? 0 : record->comm[i];
	}
	return bpf_map_lookup_elem(&plain_images, &image) != 0;
}

/* A record in `wakeups`; non-zero if the ring is full. A new pid's record carries its facts. It
 * wakes the userspace thread that waits on the ring, unless it announces a process of a plain
 * image while the ring is less than half full. That one is read at the thread's next round (at
 * most a second away); waking for it would make a round of its own for each command of a shell
 * loop (~60 a 20 s under the load of bench/otel_profiler.py). Every other record forces the
 * wake-up: the kernel's default wakes only for a record that userspace found the ring empty
 * before, and a quiet record left unread would have silenced the records behind it. */
static __always_inline long announce(__u32 pid, __u32 kind)
{
	struct announcement record = {.pid = pid, .kind = kind};
	__u64 flags = BPF_RB_FORCE_WAKEUP;

	if (pid) {
		__u32 parent_mntns = announcement_facts(&record);

		if (announced_plain(&record, parent_mntns) &&
		    2 * bpf_ringbuf_query(&wakeups, BPF_RB_AVAIL_DATA) < bpf_ringbuf_query(&wakeups, BPF_RB_RING_SIZE))
			flags = BPF_RB_NO_WAKEUP;
	}
	return bpf_ringbuf_output(&wakeups, &record, sizeof(record), flags);
}

/* Work queued for userspace's unwind thread (a file without a table, a changed mapping). */
static __always_inline void wake_userspace(void)
{
	announce(0, ANNOUNCE_NONE);
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

/* Whether to walk pid's user stack: not a kernel thread's (pid 0), and not hotstack's own process
 * unless asked (self_tgid, set at load where hotstack runs in the host's pid namespace). Its
 * samples are still counted, with their kernel stack: its CPU shows in every profile. Its own
 * Python stacks are new in nearly every interval, and walking and naming them costs more than
 * any other process's on a quiet host. */
static __always_inline int user_stack_wanted(__u32 pid)
{
	return pid != 0 && pid != self_tgid;
}

/* A seen_pids value no comm can have (a comm's last byte is its terminating 0): the pid exec'ed
 * since it was announced. */
#define SEEN_EXECED 0xffffffffffffffffULL

/* `comm` is the sampled thread's (`tid`'s) COMM_LEN-byte, zero-padded name (bpf_get_current_comm).
 * Only the main thread's name is the process's: a process whose threads have names of their own (a
 * JVM's, a browser's, a server's workers) announced by its threads' names would be announced
 * again at nearly every sample, two map updates and a wake-up each, and read again by userspace at
 * every round while it ran. */
static __always_inline void announce_pid(__u32 pid, __u32 tid, const char *comm)
{
	__u64 comm_words[2];
	__u64 *seen_comm;
	__u8 kind = ANNOUNCE_NEW;

	if (pid == 0)
		return;
	__builtin_memcpy(comm_words, comm, sizeof(comm_words));
	seen_comm = bpf_map_lookup_elem(&seen_pids, &pid);
	if (seen_comm) {
		if (seen_comm[0] == SEEN_EXECED && seen_comm[1] == SEEN_EXECED)
			kind = ANNOUNCE_EXEC;
		else if (tid != pid || (seen_comm[0] == comm_words[0] && seen_comm[1] == comm_words[1]))
			return;
	}
	bpf_map_update_elem(&seen_pids, &pid, comm_words, BPF_ANY);
	if (announce(pid, kind) == 0)
		return;
	/* the ring is full: the pid waits in new_pids (an exec replaces a NEW not drained yet; a NEW
	 * leaves an exec not drained yet), which userspace drains when it finds the ring full */
	bpf_map_update_elem(&new_pids, &pid, &kind, kind == ANNOUNCE_EXEC ? BPF_ANY : BPF_NOEXIST);
}

/* After an exec, in the new image: the pid's next sample announces it (ANNOUNCE_EXEC), or this
 * exec does where its comm is a runtime's (runtime_comms). Loaded where the kernel has BTF (else
 * exec shows only through a changed comm); `allowed` is the program's pid filter. */
static __always_inline void announce_exec(int allowed)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u64 execed[2] = {SEEN_EXECED, SEEN_EXECED};

	__u64 comm[2] = {};

	if (!allowed)
		return;
	/* A runtime's comm (the new image's: set before this tracepoint): announced now, with the
	 * comm its first sample then finds, so that userspace lists it while it starts. */
	if (bpf_get_current_comm(comm, sizeof(comm)) == 0 && bpf_map_lookup_elem(&runtime_comms, comm)) {
		bpf_map_update_elem(&seen_pids, &pid, comm, BPF_ANY);
		if (announce(pid, ANNOUNCE_EXEC) != 0)
			bpf_map_update_elem(&new_pids, &pid, &(__u8){ANNOUNCE_EXEC}, BPF_ANY);
		return;
	}
	/* ANY, not EXIST: a process never sampled may be known to userspace all the same (listed
	 * when the sampler attached, a Python process blocked in a read): its exec must reach it */
	bpf_map_update_elem(&seen_pids, &pid, execed, BPF_ANY);
}

/* The exit of the process `pid` (its main thread's), if a program announced it: queued in gone_pids
 * with the time, for userspace to forget it without reading /proc for every process it knows at
 * every interval. Its seen_pids entry stays: a sample taken later in the exit (in the kernel, after
 * exit_mm) must not announce it again, and an exit of a pid never announced is not queued. */
static __always_inline void announce_exit(__u32 pid)
{
	__u64 now;

	if (!bpf_map_lookup_elem(&seen_pids, &pid))
		return;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&gone_pids, &pid, &now, BPF_ANY);
}

#endif
