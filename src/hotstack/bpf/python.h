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
 * content and pid, and that hash is the sample key's `runtime_stack` (0: none). A stack whose key
 * userspace put in py_known (it parsed and named that stack before) is not stored again: a process
 * that runs what it ran before stores nothing, and PY_STAT_STORED stays still, which is how
 * userspace tells that a naming pass has nothing to do. A chain longer than
 * PY_MAX_FRAMES is cut and marked `truncated` (userspace shows a [truncated] frame).
 * Every read is bpf_probe_read_user: a target that exits or frees memory mid-walk ends the
 * chain early (a truncated stack), never an error.
 *
 * Per frame two reads, not seven: the frame's fields (code, instruction, marker, previous) from
 * one read of its first bytes, the code object's (argcount, flags, first line) from another, then
 * picked out of the per-CPU window (py_window). Each read stops at the last field the version
 * uses, so it never leaves the frame or code object (no page it does not own). On Debian's python3
 * with a ~45-frame recursion: 0.67x the BPF time per sample (bench/RESULTS.md, "BPF cost").
 * Userspace lists a process only if its offsets fit the window, 8-byte fields 8-aligned and 4-byte
 * ones 4-aligned (unwind/python/offsets.py: PyOffsets.fits_walker), which the masks below rely on.
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

/* A field of a window: the offset masked for the verifier (in bounds, and aligned as userspace
 * checked it is). */
static __always_inline __u64 py_win_u64(const __u8 *w, __u32 off)
{
	return *(const __u64 *)(w + (off & (PY_WINDOW - 8)));
}

static __always_inline __u32 py_win_u32(const __u8 *w, __u32 off)
{
	return *(const __u32 *)(w + (off & (PY_WINDOW - 4)));
}

static __always_inline __u32 py_max(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

/* A read length in 1..PY_WINDOW the verifier can see: the compiler knows the bound from the check
 * before the loop and would drop a plain mask, so the value passes through an empty asm first. */
static __always_inline __u32 py_window_len(__u32 end)
{
	__u32 n = end - 1;

	asm volatile("" : "+r"(n));
	return (n & (PY_WINDOW - 1)) + 1;
}

/* Walk the sampled thread's Python frames; returns the py_stacks key (0: no Python frames). */
static __always_inline __u64 python_walk(__u32 pid, __u32 tid, __u32 buffer)
{
	const struct py_proc *proc = bpf_map_lookup_elem(&python_procs, &pid);
	struct py_stack *stack;
	void *stacks;
	__u32 zero = 0, n = 0, frame_end, code_end;
	/* the pid is in the key: userspace names a stack's frames in its own process (py_known) */
	__u64 tstate, frame, hash = 0xcbf29ce484222325ULL ^ pid;
	__u8 *w;
	int i;

	if (!proc)
		return 0;
	py_count(PY_STAT_WALKS);
	stack = bpf_map_lookup_elem(&py_scratch, &zero);
	w = bpf_map_lookup_elem(&py_window, &zero);
	if (!stack || !w)
		return 0;
	/* how much of a frame and of a code object holds the fields this version uses */
	frame_end = py_max(py_max(proc->frame_code, proc->frame_previous), proc->frame_instr) + 8;
	if (proc->frame_marker != PY_NONE)
		frame_end = py_max(frame_end, proc->frame_marker + 1);
	code_end = py_max(py_max(proc->co_argcount, proc->co_flags), proc->co_firstlineno) + 4;
	if (frame_end > PY_WINDOW || code_end > PY_WINDOW)
		return 0;       /* not listed by userspace (fits_walker) */
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
		if (bpf_probe_read_user(w, py_window_len(frame_end), (void *)frame)) {
			frame = 0;      /* freed under us: the chain ends here, as a failed read of a field did */
			break;
		}
		code = py_win_u64(w, proc->frame_code) & ~proc->code_tag_mask;
		f->code = code;
		f->instr = py_win_u64(w, proc->frame_instr);
		f->marker = proc->frame_marker != PY_NONE ? w[proc->frame_marker & (PY_WINDOW - 1)] : 0;
		frame = py_win_u64(w, proc->frame_previous);
		f->checksum = 0;        /* a code object that cannot be read: 0, as before */
		if (!bpf_probe_read_user(w + PY_WINDOW, py_window_len(code_end), (void *)code))
			f->checksum = (py_win_u32(w + PY_WINDOW, proc->co_argcount) << 25) +
				      (py_win_u32(w + PY_WINDOW, proc->co_flags) << 10) +
				      py_win_u32(w + PY_WINDOW, proc->co_firstlineno);
		/* FNV-style mix of what userspace will need to tell two stacks apart. */
		hash = (hash ^ code) * 0x100000001b3ULL;
		hash = (hash ^ f->instr ^ ((__u64)f->marker << 56)) * 0x100000001b3ULL;
		n++;
	}
	stack->truncated = frame != 0;
	if (frame)
		py_count(PY_STAT_TRUNCATED);
	if (n == 0)
		return 0;
	stack->len = n;
	stack->pid = pid;
	hash = (hash ^ n ^ ((__u64)stack->truncated << 32)) | 1; /* never 0: 0 means "no Python stack" */
	if (bpf_map_lookup_elem(&py_known, &hash))
		return hash; /* userspace has it from an earlier interval or pass */
	stacks = buffer ? (void *)&py_stacks_1 : (void *)&py_stacks_0;
	if (bpf_map_lookup_elem(stacks, &hash))
		return hash; /* the same stack was stored earlier in this interval */
	if (bpf_map_update_elem(stacks, &hash, stack, BPF_ANY)) {
		py_count(PY_STAT_STACKS_FULL);
		return 0;
	}
	py_count(PY_STAT_STORED);
	return hash;
}

#endif /* HOTSTACK_PYTHON_H */
