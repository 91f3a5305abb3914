/*
 * Off the CPU 80% in sleep_eight_ms (nanosleep) and 20% in wait_on_pipe (a blocking
 * read that a helper process answers after 2 ms). The blocking system calls are made
 * right in those functions (inline `syscall`), so a frame-pointer walk names them.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline long raw_syscall3(long nr, long a, long b, long c)
{
#if defined(__aarch64__)
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;

	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	return x0;
#else
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
#endif
}

__attribute__((noinline)) void sleep_eight_ms(void)
{
	struct timespec ts = {0, 8000000};

	raw_syscall3(SYS_nanosleep, (long)&ts, 0, 0);
}

__attribute__((noinline)) void wait_on_pipe(int request, int answer)
{
	char byte = 1;

	raw_syscall3(SYS_write, request, (long)&byte, 1);
	raw_syscall3(SYS_read, answer, (long)&byte, 1);
}

int main(void)
{
	int to_helper[2], from_helper[2];
	char byte;

	if (pipe(to_helper) || pipe(from_helper))
		return 1;
	if (fork() == 0) {
		struct timespec two_ms = {0, 2000000};

		/* Never outlive the workload: the test stops only the parent (by its pid). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(to_helper[1]);
		close(from_helper[0]);
		while (read(to_helper[0], &byte, 1) == 1) {
			nanosleep(&two_ms, NULL);
			if (write(from_helper[1], &byte, 1) != 1)
				return 1;
		}
		return 0;
	}
	close(to_helper[0]);
	close(from_helper[1]);
	for (;;) {
		sleep_eight_ms();
		wait_on_pipe(to_helper[1], from_helper[0]);
	}
}
