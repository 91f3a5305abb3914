/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frame walker, included by profile.bpf.c.
 *
 * For a process listed in `python_procs` (filled by userspace: unwind/python/), find the
 * sampled thread's PyThreadState and walk its frame chain, leaf first, recording per frame
 * (code object address, instruction, marker byte, checksum). Names, files and lines are
 * resolved later in userspace from the target's memory; nothing here writes to the target.
 *
 * The thread state is found without libc knowledge: walk interp->threads (bounded) and pick
 * the one whose thread_id (pthread_self(), which is the thread pointer on x86-64 glibc and
 * musl) equals task->thread.fsbase. Per-version offsets come in the map value, so one program
 * serves 3.8-3.14 at once.
 *
 * Transport (bpf/schema.yaml): the frames go into py_stacks_<buffer> under a 64-bit hash of their
 * content, and that hash is the sample key's `runtime_stack` (0: none). A chain longer than
 * PY_MAX_FRAMES is cut and marked `truncated` (userspace shows a [truncated] frame).
 * Every read is bpf_probe_read_user: a target that exits or frees memory mid-walk ends the
 * chain early (a truncated stack), never an error.
 */
#ifndef HOTSTACK_PYTHON_H
#define HOTSTACK_PYTHON_H

#include "arch.h"
#include "schema.h"

/* Structs py_proc, py_frame, py_stack, enum py_stat and the maps: bpf/schema.yaml (group python). */
HS_PYTHON_VARIABLES
HS_PYTHON_MAPS

static __always_inline void py_count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&py_stats, &index);

	if (value)
		*value += 1;
}

static __always_inline __u64 py_read_u64(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

static __always_inline __u32 py_read_u32(__u64 addr)
{
	__u32 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u64 py_find_tstate(const struct py_proc *proc, __u32 tid)
{
	__u64 fsbase = 0, tstate, *cached;
	void *task = (void *)bpf_get_current_task();
	int i;

	if (!py_fsbase_offset || bpf_probe_read_kernel(&fsbase, sizeof(fsbase), task + py_fsbase_offset) || !fsbase)
		return 0;
	/* A cached state is used only if it still names this thread (states are freed and reused). */
	cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached && *cached && ARCH_PTHREAD_IS_THREAD(py_read_u64(*cached + proc->thread_id), fsbase))
		return *cached;
	tstate = py_read_u64(proc->threads_head);
	for (i = 0; i < PY_MAX_THREADS && tstate; i++) {
		if (ARCH_PTHREAD_IS_THREAD(py_read_u64(tstate + proc->thread_id), fsbase)) {
			bpf_map_update_elem(&py_tstates, &tid, &tstate, BPF_ANY);
			return tstate;
		}
		tstate = py_read_u64(tstate + proc->tstate_next);
	}
	return 0;
}

/* Walk the sampled thread's Python frames; returns the py_stacks key (0: no Python frames). */
static __always_inline __u64 python_walk(__u32 pid, __u32 tid, __u32 buffer)
{
	const struct py_proc *proc = bpf_map_lookup_elem(&python_procs, &pid);
	struct py_stack *stack;
	void *stacks;
	__u32 zero = 0, n = 0;
	__u64 tstate, frame, hash = 0xcbf29ce484222325ULL;
	int i;

	if (!proc)
		return 0;
	py_count(PY_STAT_WALKS);
	stack = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!stack)
		return 0;
	tstate = py_find_tstate(proc, tid);
	if (!tstate) {
		py_count(PY_STAT_NO_THREAD);
		return 0;
	}
	frame = py_read_u64(tstate + proc->tstate_frame);
	if (frame && proc->cframe_current != PY_NONE)
		frame = py_read_u64(frame + proc->cframe_current);

	for (i = 0; i < PY_MAX_FRAMES; i++) {
		struct py_frame *f = &stack->frames[i];
		__u64 code;

		if (!frame)
			break;
		code = py_read_u64(frame + proc->frame_code) & ~proc->code_tag_mask;
		f->code = code;
		f->instr = py_read_u64(frame + proc->frame_instr);
		f->marker = 0;
		if (proc->frame_marker != PY_NONE)
			bpf_probe_read_user(&f->marker, 1, (void *)(frame + proc->frame_marker));
		f->checksum = (py_read_u32(code + proc->co_argcount) << 25) + (py_read_u32(code + proc->co_flags) << 10) +
			      py_read_u32(code + proc->co_firstlineno);
		/* FNV-style mix of what userspace will need to tell two stacks apart. */
		hash = (hash ^ code) * 0x100000001b3ULL;
		hash = (hash ^ f->instr ^ ((__u64)f->marker << 56)) * 0x100000001b3ULL;
		n++;
		frame = py_read_u64(frame + proc->frame_previous);
	}
	stack->truncated = frame != 0;
	if (frame)
		py_count(PY_STAT_TRUNCATED);
	if (n == 0)
		return 0;
	stack->len = n;
	stack->pid = pid;
	hash = (hash ^ n ^ ((__u64)stack->truncated << 32)) | 1; /* never 0: 0 means "no Python stack" */
	stacks = buffer ? (void *)&py_stacks_1 : (void *)&py_stacks_0;
	if (bpf_map_lookup_elem(stacks, &hash))
		return hash; /* the same stack was stored earlier in this interval */
	if (bpf_map_update_elem(stacks, &hash, stack, BPF_ANY)) {
		py_count(PY_STAT_STACKS_FULL);
		return 0;
	}
	return hash;
}

#endif /* HOTSTACK_PYTHON_H */
