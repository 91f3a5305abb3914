/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the architectures the objects are built for (Makefile: `make bpf` builds
 * every program twice, with -D__TARGET_ARCH_x86 into NAME.bpf.o and with -D__TARGET_ARCH_arm64
 * into NAME.arm64.bpf.o; hotstack.bpf.object_path picks one by os.uname().machine).
 *
 * Every read of a user register goes through these macros, never through x86 field names:
 *   arch_user_regs            the user registers as the kernel saved them: the perf-event context's
 *                              ctx->regs, a uprobe's or kprobe's ctx, what bpf_task_pt_regs points at
 *                              (on arm64 the kernel's struct pt_regs begins with struct user_pt_regs)
 *   ARCH_REGS(ctx)            a program's struct pt_regs *ctx (kprobe, uprobe) as arch_user_regs *
 *   ARCH_REGS_IP(r)           the program counter           (x86: rip, arm64: pc)
 *   ARCH_REGS_SP(r)           the stack pointer             (x86: rsp, arm64: sp)
 *   ARCH_REGS_FP(r)           the frame pointer             (x86: rbp, arm64: x29)
 *   ARCH_REGS_LR(r)           the link register: the return address of a function that has not
 *                              saved it yet (arm64: x30; x86: 0, the return address is on the stack)
 *   ARCH_REGS_HS_BCP(r)       the register in which HotSpot's template interpreter keeps the bytecode
 *                              pointer of the method it runs (x86: r13, arm64: x22); its frame's
 *                              slot holds it only from the last call out (bpf/hotspot.h)
 *   ARCH_REGS_V8_BCO(r)       the register in which V8's interpreter (Ignition) keeps the bytecode
 *                              offset of the function it runs (v8dbg_InterpreterBytecodeOffsetRegister,
 *                              x86: r9, arm64: x19); its frame's slot holds it only from the last
 *                              call out (bpf/v8.h)
 *   ARCH_REGS_PHP_FP(r), ARCH_REGS_PHP_IP(r)   the registers in which PHP's VM keeps the
 *                              execute_data it runs and its current opline: the global register
 *                              variables of zend_execute.c in GCC builds, ZEND_VM_FP_GLOBAL_REG and
 *                              ZEND_VM_IP_GLOBAL_REG (x86: r14, r15; arm64: x27, x28); its frame's
 *                              opline slot holds the opline only from the last call or what may
 *                              throw (bpf/php.h)
 *   struct arch_regs          the four registers a stack walk starts from (ip, sp, fp, lr): 32
 *                              bytes on the BPF stack, where arm64's user_pt_regs would take 272
 *   arch_regs_load(out, r)    fill one from registers the program can read directly (its ctx)
 *   arch_regs_read_kernel(out, r)   ... from kernel memory (bpf_task_pt_regs, the stack top); -1 if
 *                              they cannot be read or are not a user context
 *   ARCH_REGS_USER_MODE(r)    the registers are a user context (x86: ring 3 code and stack
 *                              segments; arm64: EL0, 64-bit)
 *   ARCH_ENTRY_RETURN_ADDRESS(r, out)   at a function's first instruction (a uprobe), its return
 *                              address into *out (x86: read from [sp]; arm64: x30)
 *   ARCH_STRIP_RA(x)          a return address read from the stack, without a pointer
 *                              authentication code (arm64 PAC: the bits above the 48-bit VA)
 *   ARCH_PTHREAD_IS_THREAD(self, tp)   pthread_self() of a thread (CPython's thread_id) names the
 *                              thread whose thread pointer (task_struct.thread.fsbase on x86,
 *                              .thread.uw.tp_value on arm64) is tp: glibc's struct pthread is at the
 *                              thread pointer on x86 (TLS variant II) and just below it on arm64
 *                              (variant I: THREAD_SELF = (struct pthread *)tp - 1)
 *   ARCH_KERNEL_PT_REGS_SIZE  sizeof the kernel's struct pt_regs, at the top of a task's kernel
 *                              stack (the fallback where bpf_task_pt_regs is missing, before 5.15)
 */
#ifndef HOTSTACK_ARCH_H
#define HOTSTACK_ARCH_H

#include <linux/ptrace.h>

#if defined(__TARGET_ARCH_x86)

typedef struct pt_regs arch_user_regs;    /* the UAPI layout is the kernel's */
#define ARCH_REGS_IP(r) ((r)->rip)
#define ARCH_REGS_SP(r) ((r)->rsp)
#define ARCH_REGS_FP(r) ((r)->rbp)
#define ARCH_REGS_LR(r) 0ULL
#define ARCH_REGS_HS_BCP(r) ((r)->r13)
#define ARCH_REGS_V8_BCO(r) ((r)->r9)
#define ARCH_REGS_PHP_FP(r) ((r)->r14)
#define ARCH_REGS_PHP_IP(r) ((r)->r15)
#define ARCH_REGS_USER_MODE(r) (((r)->cs & 3) == 3 && ((r)->ss & 3) == 3)
#define ARCH_ENTRY_RETURN_ADDRESS(r, out) bpf_probe_read_user((out), sizeof(__u64), (void *)ARCH_REGS_SP(r))
#define ARCH_STRIP_RA(x) (x)
#define ARCH_KERNEL_PT_REGS_SIZE 168
#define ARCH_PTHREAD_IS_THREAD(self, tp) ((self) == (tp))

#elif defined(__TARGET_ARCH_arm64)

typedef struct user_pt_regs arch_user_regs;   /* regs[31], sp, pc, pstate */
#define ARCH_REGS_IP(r) ((r)->pc)
#define ARCH_REGS_SP(r) ((r)->sp)
#define ARCH_REGS_FP(r) ((r)->regs[29])
#define ARCH_REGS_LR(r) ((r)->regs[30])
#define ARCH_REGS_HS_BCP(r) ((r)->regs[22])
#define ARCH_REGS_V8_BCO(r) ((r)->regs[19])
#define ARCH_REGS_PHP_FP(r) ((r)->regs[27])
#define ARCH_REGS_PHP_IP(r) ((r)->regs[28])
/* PSR_MODE_MASK 0xf: EL0t is 0; PSR_MODE32_BIT 0x10: a 32-bit task, not ours to walk */
#define ARCH_REGS_USER_MODE(r) (((r)->pstate & 0x1f) == 0)
#define ARCH_ENTRY_RETURN_ADDRESS(r, out) (*(out) = ARCH_REGS_LR(r), 0)
#define ARCH_STRIP_RA(x) ((x) & 0x0000ffffffffffffULL)
/* 5.10's struct pt_regs: user_pt_regs (272) + orig_x0, syscallno/unused2, orig_addr_limit,
 * pmr_save, stackframe[2], lockdep_hardirqs, exit_rcu */
#define ARCH_KERNEL_PT_REGS_SIZE 336
/* sizeof(struct pthread) is a few KiB at most; two threads' structs are a stack apart */
#define ARCH_PTHREAD_IS_THREAD(self, tp) ((tp) > (self) && (tp) - (self) <= 4096)

#else
#error "build with -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64 (Makefile: make bpf)"
#endif

#define ARCH_REGS(ctx) ((arch_user_regs *)(ctx))

struct arch_regs {
	__u64 ip;
	__u64 sp;
	__u64 fp;
	__u64 lr;
};

static __always_inline void arch_regs_load(struct arch_regs *out, const arch_user_regs *r)
{
	out->ip = ARCH_REGS_IP(r);
	out->sp = ARCH_REGS_SP(r);
	out->fp = ARCH_REGS_FP(r);
	out->lr = ARCH_REGS_LR(r);
}

static __always_inline int arch_regs_read_kernel(struct arch_regs *out, const arch_user_regs *r)
{
#if defined(__TARGET_ARCH_x86)
	struct { __u64 ip, cs, flags, sp, ss; } tail;    /* pt_regs from rip to ss */

	if (bpf_probe_read_kernel(&tail, sizeof(tail), &r->rip) ||
	    bpf_probe_read_kernel(&out->fp, sizeof(out->fp), &r->rbp))
		return -1;
	if ((tail.cs & 3) != 3 || (tail.ss & 3) != 3)
		return -1;
	out->lr = 0;
#else
	struct { __u64 sp, ip, pstate; } tail;          /* user_pt_regs from sp to pstate */
	__u64 fp_lr[2];                                 /* regs[29], regs[30] */

	if (bpf_probe_read_kernel(&tail, sizeof(tail), &r->sp) ||
	    bpf_probe_read_kernel(fp_lr, sizeof(fp_lr), &r->regs[29]))
		return -1;
	if ((tail.pstate & 0x1f) != 0)
		return -1;
	out->fp = fp_lr[0];
	out->lr = fp_lr[1];
#endif
	out->ip = tail.ip;
	out->sp = tail.sp;
	return 0;
}

#endif
