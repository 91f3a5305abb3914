/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frame walker, included by profile.bpf.c.
 *
 * For a process listed in `python_procs` (filled by userspace: runtimes/python/), find the
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
 * with a ~45-frame recursion, two reads take 0.67x the BPF time per sample that seven take.
 * Userspace lists a process only if its offsets fit the window, 8-byte fields 8-aligned and 4-byte
 * ones 4-aligned (runtimes/python/offsets.py: PyOffsets.fits_walker), which the masks below rely on.
 */
#ifndef HOTSTACK_PYTHON_H
#define HOTSTACK_PYTHON_H

#include "arch.h"
#include "schema.h"
#include "runtime_common.h"

/* Structs py_proc, py_frame, py_stack, enum py_stat and the maps: bpf/schema.yaml (group python). */
HS_PYTHON_VARIABLES
HS_PYTHON_MAPS

static __always_inline void py_count(__u32 index)
{
	rt_add(&py_stats, index, 1);
}


static __always_inline __u64 py_find_tstate(const struct py_proc *proc, __u32 tid)
{
	__u64 fsbase = 0, tstate, head, interp, *cached;
	void *task = (void *)bpf_get_current_task();
	int i;

	if (!py_fsbase_offset || bpf_probe_read_kernel(&fsbase, sizeof(fsbase), task + py_fsbase_offset) || !fsbase)
		return 0;
	/* A cached state is used only if it still names this thread (states are freed and reused). */
	cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached && *cached && ARCH_PTHREAD_IS_THREAD(rt_read_u64(*cached + proc->thread_id), fsbase))
		return *cached;
	head = proc->threads_head;
	if (!head) {            /* listed while it starts: the interpreter _PyRuntime points to now */
		interp = rt_read_u64(proc->interp_ptr);
		if (!interp)
			return 0;
		head = interp + proc->threads_head_off;
	}
	tstate = rt_read_u64(head);
	for (i = 0; i < PY_MAX_THREADS && tstate; i++) {
		if (ARCH_PTHREAD_IS_THREAD(rt_read_u64(tstate + proc->thread_id), fsbase)) {
			bpf_map_update_elem(&py_tstates, &tid, &tstate, BPF_ANY);
			return tstate;
		}
		tstate = rt_read_u64(tstate + proc->tstate_next);
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

/* A walk in progress: what a frame step needs of the process (copied out of its py_proc, so that a
 * bpf_loop callback needs no lookup of it) and where the chain is. */
struct py_walk {
	struct py_stack *stack; /* the per-CPU scratch the frames go to, and the read window */
	__u8 *w;
	__u64 frame;            /* the next frame to read (0: the chain ended) */
	__u64 hash;
	__u64 code_tag_mask;
	__u32 n;
	__u32 frame_end, code_end;
	__u32 frame_code, frame_instr, frame_marker, frame_previous;
	__u32 co_argcount, co_flags, co_firstlineno;
	/* the last two code objects read in this walk and their checksums: a recursion (a function
	 * calling itself, or two calling each other) meets the same code at every level, and a live
	 * frame holds its code object, so within one walk the address is that code and its checksum
	 * cannot have changed (bpf_loop path: a read less per repeated frame) */
	__u64 seen_code[2];
	__u32 seen_checksum[2];
};

/* Frame i of the chain into stack->frames[i]; 1 when the chain has ended. */
static __always_inline long py_walk_frame(__u32 i, struct py_walk *s, struct py_stack *stack, __u8 *w)
{
	struct py_frame *f;
	__u64 code;

	/* (the bound checked on the register that indexes: a callback's index has none of its own) */
	asm volatile("" : "+r"(i));
	if (!s->frame || i >= PY_MAX_FRAMES)
		return 1;
	f = &stack->frames[i];
	if (bpf_probe_read_user(w, py_window_len(s->frame_end), (void *)s->frame)) {
		s->frame = 0;      /* freed under us: the chain ends here, as a failed read of a field did */
		return 1;
	}
	code = py_win_u64(w, s->frame_code) & ~s->code_tag_mask;
	f->code = code;
	f->instr = py_win_u64(w, s->frame_instr);
	f->marker = s->frame_marker != PY_NONE ? w[s->frame_marker & (PY_WINDOW - 1)] : 0;
	s->frame = py_win_u64(w, s->frame_previous);
	f->checksum = 0;        /* a code object that cannot be read: 0, as before */
	if (code && code == s->seen_code[0]) {
		f->checksum = s->seen_checksum[0];
	} else if (code && code == s->seen_code[1]) {
		f->checksum = s->seen_checksum[1];
	} else if (!bpf_probe_read_user(w + PY_WINDOW, py_window_len(s->code_end), (void *)code)) {
		f->checksum = (py_win_u32(w + PY_WINDOW, s->co_argcount) << 25) +
			      (py_win_u32(w + PY_WINDOW, s->co_flags) << 10) +
			      py_win_u32(w + PY_WINDOW, s->co_firstlineno);
		s->seen_code[1] = s->seen_code[0];
		s->seen_checksum[1] = s->seen_checksum[0];
		s->seen_code[0] = code;
		s->seen_checksum[0] = f->checksum;
	}
	/* FNV-style mix of what userspace will need to tell two stacks apart. */
	s->hash = rt_hash(s->hash, code);
	s->hash = rt_hash(s->hash, f->instr ^ ((__u64)f->marker << 56));
	s->n++;
	return 0;
}

/* The frame step as a bpf_loop callback (kernels 5.17+): the verifier checks it once, where the
 * unrolled loop is checked frame by frame (134k instructions, 0.1-0.2 s of CPU when the first
 * Python process is found). */
static long py_loop_step(__u32 i, void *ctx)
{
	struct py_walk *s = ctx;

	return py_walk_frame(i, s, s->stack, s->w);
}

/* Copies of the code objects of a stack new to the walker (py_code_snap, through the py_codes ring):
 * what names a frame (the code object's first bytes, its name, file name and line table) read while
 * the process runs, so that a process that exits before userspace reads its memory (a run of a
 * fraction of a second, or the last moments of any) still has its frames named. Each (process, code
 * object, checksum) is copied once (py_code_sent); a recursion's repeated code object is looked up
 * once. No count of copies bounds a walk but its frames: a count the step compares would be a
 * state of its own to the verifier at each value (3x its work on the walker). Only in the bpf_loop
 * walker (5.17+): unrolled, the steps would be checked frame by frame. */
struct py_snap_walk {
	struct py_stack *stack;
	__u64 prev_code;
	__u32 pid, n;
	__u32 code_len, co_name, co_filename, co_linetable;
};

/* `size` bytes at `addr` into `dst`, or the bytes to the end of its page where the rest is not
 * mapped (an object near the end of a mapping); the count copied (0: none). */
static __always_inline __u32 py_snap_read(__u8 *dst, __u32 size, __u64 addr)
{
	__u64 n;        /* (64 bits: a 32-bit count is widened between its check and the call) */

	if (!addr)
		return 0;
	if (!bpf_probe_read_user(dst, size, (void *)addr))
		return size;
	n = 4096 - (addr & 4095);
	asm volatile("" : "+r"(n));
	if (n >= size)
		return 0;
	return bpf_probe_read_user(dst, n, (void *)addr) ? 0 : n;
}

static __always_inline __u64 py_snap_u64(const __u8 *code, __u32 off)
{
	return *(const __u64 *)(code + (off & (PY_SNAP_CODE - 8)));
}

static long py_snap_step(__u32 i, void *ctx)
{
	struct py_snap_walk *w = ctx;
	struct py_code_seen key = {};
	struct py_code_snap *snap;
	struct py_frame *f;
	__u32 len = w->code_len;
	__u8 one = 1;

	if (i >= w->n)
		return 1;
	/* (the bound checked on the register that indexes, apart from the others) */
	asm volatile("" : "+r"(i));
	if (i >= PY_MAX_FRAMES)
		return 1;
	f = &w->stack->frames[i];
	if (!f->code || !f->checksum || f->code == w->prev_code)
		return 0;       /* unreadable (checksum 0), or a recursion's code met one frame ago */
	w->prev_code = f->code;
	key.code = f->code;
	key.pid = w->pid;
	key.checksum = f->checksum;
	if (bpf_map_lookup_elem(&py_code_sent, &key))
		return 0;
	snap = bpf_ringbuf_reserve(&py_codes, sizeof(*snap), 0);
	if (!snap) {
		py_count(PY_STAT_SNAPS_LOST);
		return 1;
	}
	snap->pid = w->pid;
	snap->checksum = f->checksum;
	snap->code = f->code;
	/* 1..PY_SNAP_CODE bytes, as the verifier can see (userspace gives 8..PY_SNAP_CODE) */
	len -= 1;
	asm volatile("" : "+r"(len));
	len = (len & (PY_SNAP_CODE - 1)) + 1;
	if (bpf_probe_read_user(snap->code_bytes, len, (void *)f->code)) {
		bpf_ringbuf_discard(snap, BPF_RB_NO_WAKEUP);
		return 0;
	}
	snap->code_len = len;
	snap->name_addr = py_snap_u64(snap->code_bytes, w->co_name);
	snap->file_addr = py_snap_u64(snap->code_bytes, w->co_filename);
	snap->lines_addr = py_snap_u64(snap->code_bytes, w->co_linetable);
	snap->name_len = py_snap_read(snap->name_bytes, PY_SNAP_NAME, snap->name_addr);
	snap->file_len = py_snap_read(snap->file_bytes, PY_SNAP_FILE, snap->file_addr);
	snap->lines_len = py_snap_read(snap->lines_bytes, PY_SNAP_LINES, snap->lines_addr);
	bpf_ringbuf_submit(snap, BPF_RB_NO_WAKEUP);
	bpf_map_update_elem(&py_code_sent, &key, &one, BPF_ANY);
	py_count(PY_STAT_SNAPS);
	return 0;
}

static __always_inline void py_snap_codes(__u32 pid, struct py_stack *stack, __u32 n, const struct py_proc *proc)
{
	struct py_snap_walk w = {
		.stack = stack, .pid = pid, .n = n, .code_len = proc->snap_code_len,
		.co_name = proc->co_name, .co_filename = proc->co_filename, .co_linetable = proc->co_linetable,
	};

	bpf_loop(PY_MAX_FRAMES, py_snap_step, &w, 0);
}

/* The walk without bpf_loop (kernels before 5.17): py_walk_frame's steps, unrolled on registers
 * (through the struct on the stack the verifier's work on this loop was 425k instructions, against
 * 135k). */
static __always_inline void py_walk_unrolled(struct py_walk *s, const struct py_proc *proc, struct py_stack *stack,
					     __u8 *w)
{
	__u64 frame = s->frame, hash = s->hash;
	__u32 n = 0;
	int i;

	for (i = 0; i < PY_MAX_FRAMES; i++) {
		struct py_frame *f = &stack->frames[i];
		__u64 code;

		if (!frame)
			break;
		if (bpf_probe_read_user(w, py_window_len(s->frame_end), (void *)frame)) {
			frame = 0;
			break;
		}
		code = py_win_u64(w, proc->frame_code) & ~proc->code_tag_mask;
		f->code = code;
		f->instr = py_win_u64(w, proc->frame_instr);
		f->marker = proc->frame_marker != PY_NONE ? w[proc->frame_marker & (PY_WINDOW - 1)] : 0;
		frame = py_win_u64(w, proc->frame_previous);
		f->checksum = 0;
		if (!bpf_probe_read_user(w + PY_WINDOW, py_window_len(s->code_end), (void *)code))
			f->checksum = (py_win_u32(w + PY_WINDOW, proc->co_argcount) << 25) +
				      (py_win_u32(w + PY_WINDOW, proc->co_flags) << 10) +
				      py_win_u32(w + PY_WINDOW, proc->co_firstlineno);
		hash = rt_hash(hash, code);
		hash = rt_hash(hash, f->instr ^ ((__u64)f->marker << 56));
		n++;
	}
	s->frame = frame;
	s->hash = hash;
	s->n = n;
}

/* Walk the sampled thread's Python frames; returns the py_stacks key (0: no Python frames).
 * `use_loop` (a constant): the frames stepped by bpf_loop, else by an unrolled loop (kernels before
 * 5.17, which have no bpf_loop: the program that calls it would not load there). `eval` gets the
 * evaluation loop's code, [start, end) and its split part's [start, end) (the leaf's ranges of
 * struct nu_state). */
static __always_inline __u64 python_walk(__u32 pid, __u32 tid, __u32 buffer, int use_loop, __u64 *eval)
{
	const struct py_proc *proc = bpf_map_lookup_elem(&python_procs, &pid);
	struct py_stack *stack;
	struct py_walk s = {};
	void *stacks;
	__u32 zero = 0;
	__u64 tstate, hash;
	__u8 *w;

	if (!proc)
		return 0;
	eval[0] = proc->eval_start;
	eval[1] = proc->eval_end;
	eval[2] = proc->eval_part_start;
	eval[3] = proc->eval_part_end;
	py_count(PY_STAT_WALKS);
	stack = bpf_map_lookup_elem(&py_scratch, &zero);
	w = bpf_map_lookup_elem(&py_window, &zero);
	if (!stack || !w)
		return 0;
	/* how much of a frame and of a code object holds the fields this version uses */
	s.frame_end = py_max(py_max(proc->frame_code, proc->frame_previous), proc->frame_instr) + 8;
	if (proc->frame_marker != PY_NONE)
		s.frame_end = py_max(s.frame_end, proc->frame_marker + 1);
	s.code_end = py_max(py_max(proc->co_argcount, proc->co_flags), proc->co_firstlineno) + 4;
	if (s.frame_end > PY_WINDOW || s.code_end > PY_WINDOW)
		return 0;       /* not listed by userspace (fits_walker) */
	s.stack = stack;
	s.w = w;
	s.code_tag_mask = proc->code_tag_mask;
	s.frame_code = proc->frame_code;
	s.frame_instr = proc->frame_instr;
	s.frame_marker = proc->frame_marker;
	s.frame_previous = proc->frame_previous;
	s.co_argcount = proc->co_argcount;
	s.co_flags = proc->co_flags;
	s.co_firstlineno = proc->co_firstlineno;
	/* the pid is in the key: userspace names a stack's frames in its own process (py_known) */
	s.hash = RT_HASH_START ^ pid;
	tstate = py_find_tstate(proc, tid);
	if (!tstate) {
		py_count(PY_STAT_NO_THREAD);
		return 0;
	}
	s.frame = rt_read_u64(tstate + proc->tstate_frame);
	if (s.frame && proc->cframe_current != PY_NONE)
		s.frame = rt_read_u64(s.frame + proc->cframe_current);

	if (use_loop) {
		bpf_loop(PY_MAX_FRAMES, py_loop_step, &s, 0);
	} else {
		py_walk_unrolled(&s, proc, stack, w);
	}
	stack->truncated = s.frame != 0;
	if (s.frame)
		py_count(PY_STAT_TRUNCATED);
	if (s.n == 0)
		return 0;
	stack->len = s.n;
	stack->pid = pid;
	hash = rt_stack_key(s.hash, s.n, stack->truncated);
	if (bpf_map_lookup_elem(&py_known, &hash))
		return hash; /* userspace has it from an earlier interval or pass */
	stacks = buffer ? (void *)&py_stacks_1 : (void *)&py_stacks_0;
	if (bpf_map_lookup_elem(stacks, &hash))
		return hash; /* the same stack was stored earlier in this interval */
	if (use_loop && proc->snap_code_len)
		py_snap_codes(pid, stack, s.n, proc);
	if (bpf_map_update_elem(stacks, &hash, stack, BPF_ANY)) {
		py_count(PY_STAT_STACKS_FULL);
		return 0;
	}
	py_count(PY_STAT_STORED);
	return hash;
}

#endif /* HOTSTACK_PYTHON_H */
